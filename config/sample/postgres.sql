-- The sample shop schema used by `headwater quickstart`, compose/ and compose/local.sh:
-- customers, products and orders, with a few rows in each. ORDER_ROWS orders are
-- generated, the caller substituting ORDER_ROWS below.
CREATE TABLE customers (
    id         serial PRIMARY KEY,
    name       text NOT NULL,
    email      text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE products (
    id    serial PRIMARY KEY,
    sku   text NOT NULL UNIQUE,
    name  text NOT NULL,
    price numeric(10,2) NOT NULL
);
CREATE TABLE orders (
    id          bigserial PRIMARY KEY,
    customer_id int NOT NULL REFERENCES customers (id),
    product_id  int NOT NULL REFERENCES products (id),
    quantity    int NOT NULL,
    amount      numeric(12,2) NOT NULL,
    status      text NOT NULL DEFAULT 'new',
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO customers (name, email)
    SELECT 'Customer ' || g, 'customer' || g || '@example.com' FROM generate_series(1, 100) g;
INSERT INTO products (sku, name, price)
    SELECT 'SKU-' || lpad(g::text, 4, '0'), 'Product ' || g, 5 + g * 2.5 FROM generate_series(1, 20) g;
INSERT INTO orders (customer_id, product_id, quantity, amount, status)
    SELECT 1 + g % 100, 1 + g % 20, 1 + g % 5, (1 + g % 5) * (5 + (1 + g % 20) * 2.5),
           (ARRAY['new', 'paid', 'shipped'])[1 + g % 3]
    FROM generate_series(1, ORDER_ROWS) g;
