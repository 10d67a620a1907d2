// The sample shop for the MongoDB connector: customers and orders in database `shop`.
const shop = db.getSiblingDB('shop');
shop.customers.insertMany(Array.from({length: 100}, (_, i) => ({
  _id: i + 1, name: `Customer ${i + 1}`, email: `customer${i + 1}@example.com`,
})));
shop.orders.insertMany(Array.from({length: 1000}, (_, i) => ({
  customer_id: 1 + (i % 100), items: [{sku: `SKU-${String(1 + (i % 20)).padStart(4, '0')}`, quantity: 1 + (i % 5)}],
  status: ['new', 'paid', 'shipped'][i % 3], created_at: new Date(),
})));
