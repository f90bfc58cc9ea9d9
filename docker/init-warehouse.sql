-- Runs once when the PostgreSQL volume is first created: a database for the warehouse tables,
-- separate from Airflow's metadata database.
CREATE DATABASE abm_warehouse;
