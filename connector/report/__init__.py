"""The report of the features job (jobs/features.py): its output folder read back (`results`), the summary's text
tables (`tables`) and the HTML page with its charts (`page`). Pure code: no Flink, no network; the job, and
`--results-only` without a job, call it."""
