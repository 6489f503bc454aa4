"""Spark's discovery hook for the ``exactly`` data source.

PySpark (4.0+) registers, in every SparkSession, the ``DefaultSource`` of each
top-level module whose name starts with ``pyspark_`` on its Python workers' path
(``pyspark/sql/worker/lookup_data_sources.py``): with Exactly installed,
``spark.read.format("exactly")`` works in any session -- a plain ``pyspark`` shell
included -- with no ``spark.dataSource.register`` call.
"""

from exactly.app.spark.datasource import ExactlyDataSource as DefaultSource

__all__ = ["DefaultSource"]
