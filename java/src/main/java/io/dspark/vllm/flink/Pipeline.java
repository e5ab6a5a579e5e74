package io.dspark.vllm.flink;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.Table;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.connector.ProviderContext;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.expressions.Expression;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import static org.apache.flink.table.api.Expressions.$;
import static org.apache.flink.table.api.Expressions.callSql;

/**
 * The pipeline behind a scan, one DataStream of internal rows (RowData) on the job's execution environment:
 *
 * <pre>
 *   internal source (files of bodies | prompts)          a DataStream from the plan ({@link Sources})
 *     -> request(_prompt, _request_id)                  request mode: Flink's async I/O ({@link RequestStep}),
 *                                                       the source's DataStream in, internal rows in and out
 *     -> parse(_body, ...)                              cpu: {@link ParseOperator} (the native core, in the JVM)
 *                                                       gpu: a vectorized Python function, flat columns
 *     -> the declared columns (ROW(...)) and metadata    cpu: the ParseOperator's {@link RowShape} (the plan's
 *                                                       layouts); else SQL expressions from the plan
 * </pre>
 *
 * The parse step runs only when the query reads a column it makes. Tables and streams are converted only where
 * SQL still makes a column, in a table environment of this scan's own: per route,
 *
 * <pre>
 *   cpu, every column with a layout (the declared row made by the ParseOperator)   0 conversions
 *   COUNT(*) (no column read)                                                       0
 *   cpu with a column only SQL makes: fromDataStream after the parse, toDataStream  2
 *   gpu (the parse step in Python): fromDataStream of the source, toDataStream      2
 *   metadata only (no parse step): fromDataStream of the source, toDataStream       2
 * </pre>
 */
final class Pipeline {

    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(Pipeline.class);

    private Pipeline() {}

    static DataStream<RowData> build(
            StreamExecutionEnvironment env,
            Map<String, String> config,
            TablePlan plan,
            List<String> physicalNames,
            List<String> metadataKeys,
            DataType produced,
            ClassLoader classLoader,
            ProviderContext context) {
        DataStream<RowData> stream = uid(Sources.build(env, plan.source()), context, "source");
        if (plan.request() != null) {
            stream = uid(request(plan, stream), context, "requests");
        }
        RowType type = (RowType) ((InternalTypeInfo<RowData>) stream.getType()).toLogicalType();
        Set<String> flat = new LinkedHashSet<>();
        for (String name : physicalNames) {
            for (JsonNode need : plan.physical(name).get("needs")) {
                flat.add(need.asText());
            }
        }
        Map<String, String> metadataSql = new LinkedHashMap<>();
        for (String key : metadataKeys) {
            metadataSql.put(key, plan.metadataSql(key));
        }
        boolean parse = !flat.isEmpty();
        for (String sql : metadataSql.values()) {
            parse |= plan.parseInternal().contains(sql.replace("`", ""));
        }
        if (!parse && physicalNames.isEmpty() && metadataKeys.isEmpty()) {
            // A query that reads no column (COUNT(*)): one empty row per body.
            return stream.map(row -> (RowData) new GenericRowData(0)).returns(InternalTypeInfo.of(RowType.of()));
        }
        Map<String, String> made = parse ? producedFlat(plan, flat) : null;
        String python = parse ? plan.pythonParseReason(made.keySet()) : null;
        if (parse && python == null) {
            DataStream<RowData> declared = parseToDeclared(plan, stream, type, physicalNames, metadataKeys, produced);
            if (declared != null) {
                return declared; // no table environment, no conversion between tables and streams
            }
        }

        // A column that needs SQL (another cast, NOT NULL, metadata without a parse step) or a parse step in
        // Python: a table environment of its own on the job's environment, in the session's class loader (the
        // one the factory was found in: a jar added with ADD JAR or 'pipeline.jars').
        StreamTableEnvironment t = StreamTableEnvironment.create(
                env, EnvironmentSettings.newInstance().inStreamingMode().withClassLoader(classLoader).build());
        Map<String, String> settings = new LinkedHashMap<>(config);
        settings.putAll(plan.settings());
        t.getConfig().addConfiguration(Configuration.fromMap(settings));
        Table rows;
        if (!parse) {
            rows = t.fromDataStream(stream);
        } else if (python == null) {
            rows = t.fromDataStream(parseInJvm(plan, stream, type, made, metadataSql.values()));
        } else {
            rows = t.fromDataStream(PythonParseStep.parse(plan, stream, type, made, config, python));
        }

        List<String> fields = DataType.getFieldNames(produced);
        List<Expression> select = new ArrayList<>();
        Iterator<String> names = fields.iterator();
        for (String column : physicalNames) {
            select.add(callSql(plan.physical(column).get("sql").asText()).as(names.next()));
        }
        for (String sql : metadataSql.values()) {
            select.add(callSql(sql).as(names.next()));
        }
        return t.toDataStream(rows.select(select.toArray(new Expression[0])), produced.bridgedTo(RowData.class));
    }

    /**
     * Request mode: the source's prompt rows straight through Flink's async I/O operator with {@link RequestStep}
     * (unordered by default), the in-flight prompts in its checkpoint state; internal rows in and out.
     */
    /**
     * The uid the planner gives this step of the scan ({@code 'table.exec.uid.generation'} = 'ALWAYS', or a
     * compiled plan), so that a savepoint's state maps to the same step after a change of parallelism; without
     * one, Flink derives the step's id from the job graph, which a rescale changes (its state then cannot be
     * restored).
     */
    private static SingleOutputStreamOperator<RowData> uid(
            SingleOutputStreamOperator<RowData> step, ProviderContext context, String name) {
        if (context != null) {
            context.generateUid(name).ifPresent(step::uid);
        }
        return step;
    }

    private static SingleOutputStreamOperator<RowData> request(TablePlan plan, DataStream<RowData> prompts) {
        JsonNode request = plan.request();
        RequestStep step = new RequestStep(request);
        long timeout = request.get("timeout_ms").asLong();
        int capacity = request.get("capacity").asInt();
        SingleOutputStreamOperator<RowData> out =
                "ordered".equals(request.get("output_mode").asText())
                        ? AsyncDataStream.orderedWait(prompts, step, timeout, TimeUnit.MILLISECONDS, capacity)
                        : AsyncDataStream.unorderedWait(prompts, step, timeout, TimeUnit.MILLISECONDS, capacity);
        return out.returns(RequestStep.typeInfo()).name("dspark-vllm requests");
    }

    /**
     * The parse step in the JVM straight to the table's declared row ({@link RowShape#declared}) from the source's
     * (or request step's) DataStream: no SQL, no table. Null where a column needs SQL (the plan's {@code from}).
     */
    private static DataStream<RowData> parseToDeclared(
            TablePlan plan, DataStream<RowData> rows, RowType input, List<String> physicalNames,
            List<String> metadataKeys, DataType produced) {
        List<JsonNode> layouts = new ArrayList<>();
        for (String name : physicalNames) {
            layouts.add(plan.physical(name).get("from"));
        }
        for (String key : metadataKeys) {
            layouts.add(plan.metadata(key).get("from"));
        }
        JsonNode jvm = plan.json.get("native");
        Set<String> made = new LinkedHashSet<>(strings(jvm.get("columns")));
        RowType out = (RowType) produced.getLogicalType();
        RowShape shape = RowShape.declared(out, layouts, input, made);
        if (shape == null) {
            return null;
        }
        LOG.info("dspark-vllm: the parse step runs in the JVM (native core) and makes the declared rows");
        return parseStream(plan, rows, input, shape);
    }

    /** The flat columns the parse step makes for {@code needed}, and the internal ones (name -> Flink SQL type). */
    private static Map<String, String> producedFlat(TablePlan plan, Set<String> needed) {
        Map<String, String> produced = new LinkedHashMap<>();
        plan.flatTypes().forEach((name, type) -> {
            if (needed.contains(name) || plan.parseInternal().contains(name)) {
                produced.put(name, type);
            }
        });
        return produced;
    }

    /**
     * The parse step in the JVM ({@link ParseOperator}) to the flat row ({@link RowShape#flat}): the input columns
     * the metadata reads, then the flat columns; SQL makes the declared row of it. No Python worker.
     */
    private static DataStream<RowData> parseInJvm(
            TablePlan plan, DataStream<RowData> rows, RowType inputType, Map<String, String> produced,
            java.util.Collection<String> after) {
        List<String> inputs = inputType.getFieldNames();
        List<String> body = new ArrayList<>();
        List<LogicalType> types = new ArrayList<>();
        produced.forEach((name, type) -> {
            if (!plan.parseInternal().contains(name)) {
                body.add(name);
                types.add(TablePlan.dataType(type).getLogicalType());
            }
        });
        // Only the input columns the metadata columns read go on (the body only for 'raw.body'): every column
        // of a row is copied between chained operators.
        List<Integer> kept = new ArrayList<>();
        for (int i = 0; i < inputs.size(); i++) {
            String name = inputs.get(i);
            if (after.stream().anyMatch(sql -> sql.contains(name))) {
                kept.add(i);
            }
        }
        RowShape shape = RowShape.flat(inputType, kept.stream().mapToInt(Integer::intValue).toArray(), body, types);
        LOG.info("dspark-vllm: the parse step runs in the JVM (native core), no Python worker");
        return parseStream(plan, rows, inputType, shape);
    }

    /** The parse step's operator on a DataStream of internal rows of {@code inputType}. */
    private static DataStream<RowData> parseStream(
            TablePlan plan, DataStream<RowData> in, RowType inputType, RowShape shape) {
        JsonNode jvm = plan.json.get("native");
        List<String> inputs = inputType.getFieldNames();
        ParseOperator step =
                new ParseOperator(
                        jvm.get("document").asText(),
                        shape,
                        inputType,
                        inputs.indexOf("_body"),
                        inputs.indexOf("_source"),
                        inputs.indexOf("_request_error"),
                        jvm.get("require_created").asBoolean(),
                        jvm.get("batch_size").asInt(),
                        jvm.get("batch_ms").asLong(),
                        jvm.path("auto_fallback").isTextual() ? jvm.get("auto_fallback").asText() : null);
        return in.transform("dspark-vllm parse (native core)", InternalTypeInfo.of(shape.type()), step);
    }

    private static List<String> strings(JsonNode array) {
        List<String> list = new ArrayList<>();
        array.forEach(node -> list.add(node.asText()));
        return list;
    }
}
