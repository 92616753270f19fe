"""A thin stand-in for the parts of AWS Glue's ``awsglue`` library that ``glue_jobs/aggregate_metrics.py`` uses
(``awsglue`` is not on PyPI; Glue 5 puts it on the job's path). Same module names, signatures and argument rules as
Glue's (https://github.com/awslabs/aws-glue-libs), nothing more: the suite puts this directory on the job's
``PYTHONPATH`` and runs the script with ``spark-submit`` as Glue does."""
