"""Planning: what the jar's factories ask on the client machine when Flink plans a query (options and columns
checked, the pipeline described as typed records). Pure code: no pyflink, no JVM.

The factory (`io.dspark.vllm.sql.DsparkVllmTableFactory`, in the jar shipped with this package) runs

    python -m connector.plan  < declared-table.json  > plan.json

on the client when Flink plans a query over the table (the same way Flink runs Python to load a Python UDF),
with `python.client.executable`. Input: the table's options, its resolved columns and its watermark. Output:
either `{"error": "..."}`, a message for the user (Flink raises it as a ValidationException), or the plan:

- `source`: what the bodies (replay) or prompts (request mode) come from, as data the jar builds a DataStream
  of (`io.dspark.vllm.sql.Sources`), no SQL: `kind` `replay` (`path`, `monitor_interval_ms` or none: the
  lines of the files, `_body`/`_source`/`_source_line`: the line in its file), `prompts` (`path`: the lines
  of the files, `_prompt`/`_request_id`, the id made of the file, the line number and the line) or `rate`
  (`rate`, `count` or -1 for no end,
  `template` whose `{n}` is the number, `table`: the ids are `<table>-<n>`);
- `version`: `connector.plan.contract.PLAN_VERSION`, checked by the jar;
- `request`: the request step (Java async I/O, `io.dspark.vllm.engine.RequestStep`): the client's settings
  (`contract.client_spec`), the columns it adds, the output mode, what a failed request does, the operator's
  capacity and backstop timeout;
- `parse_inputs`, `flat`: the parse function's arguments and every column it can produce (Flink SQL types);
- `physical`: for each declared physical column, the flat columns it needs and its layout `from`; `metadata`:
  the readable keys, their types and layouts. A layout is what the JVM makes the declared row of, with no SQL
  (`io.dspark.vllm.engine.RowShape`): `{"column": NAME}` (a flat, internal or input column, written as the
  declared type: Flink's CAST where that is another, `io.dspark.vllm.engine.Casts`; TIMESTAMP_LTZ(3) from BIGINT
  epoch milliseconds; `default`: a value for NULL), or `{"row": [{"name", "from"}, ...]}`;
- `settings`: the Flink options of this table's own Python operators; `bounded`;
- `native`: the parse step in the JVM (the columns the native core makes and their types, the batching), or
  `why` the parse step runs in Python (`connector.plan.parse`);
- `plan`: what the Python parse function is built from on the workers (`ParseFunctionPlan.document()`: the table's
  options less its secrets, the profile's files as JSON, whether `created` is required), JSON like the rest;
  `connector.flink.runtime` rebuilds the `ParseFunctionPlan` from it, with the flat columns the query really reads.

Where the parse step runs in Python, the factory asks once more, after projection push-down, with
`{"parse_function": {"plan": ..., "columns": [...]}}`, and gets `{"payload": ...}`: the Python function as
PyFlink carries one, a pickle (of the call `parse_function(plan as JSON text, columns)`, made by
`connector.flink.runtime.function_payload`), base64. That pickle is PyFlink's format for a Python function, not
ours: nothing in it but the call and its two JSON strings. Where it runs in the JVM, the scan asks once more
too, with `{"native_read": {"table": the plan, "physical": [...], "metadata": [...]}}` (a format's decoder: `{"format":
its plan, "physical": [...]}`), and gets what the native core reads for those columns (`NativeRead`: the core's plan
document narrowed to the core columns the row reads, and the core's result columns with their types); a model's
plan carries it (`native.read`).

The plans are made of the typed records of `connector.plan.records` (a key the declaration has not cannot be
written; `to_json` writes them), and the jar reads them with the reader generated from that declaration.

The rooms: `table` (a 'dspark-vllm' table), `model` (a 'dspark-vllm' model), `format` ('format' = 'dspark-vllm'),
and the parts they share: `layout` (a declared column made of the profile's flat columns, the casts), `answer`
(answer fields), `request` (the store's URI, the API key, request ids), `parse` (the parse step's part),
`metadata` (the metadata keys), `contract` (what Python and the jar share), `records` (the plan's typed records),
`parse_function` (the Python parse function's plan); `__main__` answers the factories on stdin/stdout.
"""
