-- shop.daily: one row a day over shop.orders, read as this run staged it (on the run's branch).
CREATE MATERIALIZED VIEW daily AS
SELECT day, count(*) AS orders, sum(amount) AS amount
FROM orders
GROUP BY day;
