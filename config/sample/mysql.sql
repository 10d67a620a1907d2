-- The sample shop schema for MySQL 8 and MariaDB (compose/ and compose/local.sh), with the
-- replication user the sample connectors use.
CREATE DATABASE IF NOT EXISTS inventory;
USE inventory;
CREATE TABLE customers (
    id         INT AUTO_INCREMENT PRIMARY KEY,
    name       VARCHAR(200) NOT NULL,
    email      VARCHAR(200) NOT NULL UNIQUE,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
);
CREATE TABLE products (
    id    INT AUTO_INCREMENT PRIMARY KEY,
    sku   VARCHAR(40) NOT NULL UNIQUE,
    name  VARCHAR(200) NOT NULL,
    price DECIMAL(10,2) NOT NULL
);
CREATE TABLE orders (
    id          BIGINT AUTO_INCREMENT PRIMARY KEY,
    customer_id INT NOT NULL,
    product_id  INT NOT NULL,
    quantity    INT NOT NULL,
    amount      DECIMAL(12,2) NOT NULL,
    status      VARCHAR(20) NOT NULL DEFAULT 'new',
    created_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    FOREIGN KEY (customer_id) REFERENCES customers (id),
    FOREIGN KEY (product_id) REFERENCES products (id)
);
INSERT INTO customers (name, email)
    SELECT CONCAT('Customer ', seq), CONCAT('customer', seq, '@example.com') FROM (WITH RECURSIVE s (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM s WHERE seq < 100) SELECT seq FROM s) n;
INSERT INTO products (sku, name, price)
    SELECT CONCAT('SKU-', LPAD(seq, 4, '0')), CONCAT('Product ', seq), 5 + seq * 2.5 FROM (WITH RECURSIVE s (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM s WHERE seq < 20) SELECT seq FROM s) n;
INSERT INTO orders (customer_id, product_id, quantity, amount, status)
    SELECT 1 + seq % 100, 1 + seq % 20, 1 + seq % 5, (1 + seq % 5) * (5 + (1 + seq % 20) * 2.5),
           ELT(1 + seq % 3, 'new', 'paid', 'shipped')
    FROM (WITH RECURSIVE s (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM s WHERE seq < 1000) SELECT seq FROM s) n;
CREATE USER IF NOT EXISTS 'cdc'@'%' IDENTIFIED BY 'cdc';
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cdc'@'%';
