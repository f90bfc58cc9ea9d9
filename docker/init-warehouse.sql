-- Runs once when the PostgreSQL volume is first created: a database for the warehouse tables,
-- separate from Airflow's metadata database, and the (empty) target-accounts table the sync DAG
-- reads, so that DAG runs from the first start; fill it with the accounts that belong on the list.
CREATE DATABASE abm_warehouse;
\connect abm_warehouse
CREATE TABLE IF NOT EXISTS abm_target_accounts (account_id TEXT, account_name TEXT, crm_org_id TEXT);
