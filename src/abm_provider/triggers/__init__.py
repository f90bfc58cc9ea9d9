"""Triggers of the ABM provider, run by Airflow's triggerer for deferrable operators and sensors."""
