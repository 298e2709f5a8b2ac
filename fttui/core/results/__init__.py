"""Results: the SQLite store of summary rows and what is made of them (reference tables,
reports, charts, the results screen's filtering and sorting). Import the modules directly:
importing the store does not pull in the report."""
