package io.dspark.vllm.flink;

import io.dspark.vllm.plan.Plan;

import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.connector.ProviderContext;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.RowType;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;


/**
 * The pipeline behind a scan, one DataStream of internal rows (RowData) on the job's execution environment:
 *
 * <pre>
 *   internal source (files of bodies | prompts)          a DataStream from the plan ({@link Sources})
 *     -> request(_prompt, _request_id)                  request mode: Flink's async I/O ({@link RequestStep}),
 *                                                       the source's DataStream in, internal rows in and out
 *     -> parse(_body, ...)                              cpu: {@link ParseOperator} (the native core, in the JVM)
 *                                                       gpu: {@link PythonParseStep}: Flink's Arrow Python
 *                                                       operator calls a vectorized function (libcudf), flat
 *                                                       columns beside the input row's
 *     -> the declared columns (ROW(...)) and metadata    a {@link RowShape} of the plan's layouts: the
 *                                                       ParseOperator's own (cpu), or a map over the flat row
 *                                                       (gpu) or over the input row (metadata only)
 * </pre>
 *
 * The parse step runs only when the query reads a column it makes. No route has a table environment of its own
 * or converts between tables and streams: per route,
 *
 * <pre>
 *   cpu (the declared row made by the ParseOperator)                 0 conversions
 *   gpu (PythonParseStep, then the declared row in a map)            0
 *   metadata only (no parse step: the declared row in a map)         0
 *   COUNT(*) (no column read)                                        0
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
            ProviderContext context) {
        DataStream<RowData> stream = uid(Sources.build(env, plan.source()), context, "source");
        if (plan.request() != null) {
            stream = uid(request(plan, stream), context, "requests");
        }
        RowType type = (RowType) ((InternalTypeInfo<RowData>) stream.getType()).toLogicalType();
        Set<String> flat = new LinkedHashSet<>();
        for (String name : physicalNames) {
            flat.addAll(plan.physical(name).needs);
        }
        boolean parse = !flat.isEmpty();
        for (String key : metadataKeys) { // a key the parse step makes ('error.reason', 'source.line', ...)
            parse |= plan.parseInternal().contains(plan.metadata(key).from.column);
        }
        if (!parse && physicalNames.isEmpty() && metadataKeys.isEmpty()) {
            // A query that reads no column (COUNT(*)): one empty row per body.
            return stream.map(row -> (RowData) new GenericRowData(0)).returns(InternalTypeInfo.of(RowType.of()));
        }
        if (!parse) {
            // Metadata only (the request's, the file's): the declared row of the input row's columns, no parse.
            RowShape shape = RowShape.declared(
                    (RowType) produced.getLogicalType(), layouts(plan, physicalNames, metadataKeys), type, Map.of());
            return stream.map(new Shaped(shape)).returns(InternalTypeInfo.of(shape.type())).name("dspark-vllm row");
        }
        Map<String, String> made = producedFlat(plan, flat);
        String python = plan.pythonParseReason(made.keySet());
        if (python == null) {
            return parseToDeclared(plan, stream, type, physicalNames, metadataKeys, produced);
        }

        // The parse step in Python (libcudf), then the declared row of its flat row (the input's fields the layouts
        // read, then the flat columns the function makes), as for a metadata-only query.
        requirePython(python);
        List<Plan.Layout> layouts = layouts(plan, physicalNames, metadataKeys);
        DataStream<RowData> parsed = PythonParseStep.parse(plan, stream, type, columnsRead(layouts), made, config, python);
        RowType flatRow = (RowType) ((InternalTypeInfo<RowData>) parsed.getType()).toLogicalType();
        RowShape shape = RowShape.declared(
                (RowType) produced.getLogicalType(), layouts, flatRow, Map.of(), plan.plan.answer);
        return parsed.map(new Shaped(shape)).returns(InternalTypeInfo.of(shape.type())).name("dspark-vllm row");
    }

    /** Each declared column's layout, then each metadata key's (the plan's {@code from}). */
    private static List<Plan.Layout> layouts(TablePlan plan, List<String> physicalNames, List<String> metadataKeys) {
        List<Plan.Layout> layouts = new ArrayList<>();
        for (String name : physicalNames) {
            layouts.add(plan.physical(name).from);
        }
        for (String key : metadataKeys) {
            layouts.add(plan.metadata(key).from);
        }
        return layouts;
    }

    static final String ARROW_PYTHON_OPERATOR =
            "org.apache.flink.table.runtime.operators.python.scalar.arrow.ArrowPythonScalarFunctionOperator";

    /**
     * Flink's Python operators are in its flink-python jar, which a Flink distribution keeps in opt/: said in one
     * line before {@link PythonParseStep}, which uses them, is loaded (a NoClassDefFoundError otherwise).
     */
    private static void requirePython(String reason) {
        try {
            Class.forName(ARROW_PYTHON_OPERATOR, false, Pipeline.class.getClassLoader());
        } catch (ClassNotFoundException | LinkageError e) {
            throw new org.apache.flink.table.api.ValidationException(
                    "dspark-vllm: the parse step runs in a Python worker (" + reason + "), which needs Flink's "
                            + "flink-python jar on the classpath (a distribution's opt/flink-python-*.jar into lib/); "
                            + "or set 'parse.backend' = 'cpu'.");
        }
    }

    /** The columns {@code layouts} read (their {@code column}s, in ROWs too). */
    private static Set<String> columnsRead(List<Plan.Layout> layouts) {
        Set<String> read = new LinkedHashSet<>();
        List<Plan.Layout> open = new ArrayList<>(layouts);
        while (!open.isEmpty()) {
            Plan.Layout layout = open.remove(open.size() - 1);
            if (layout == null) {
                continue;
            }
            if (layout.column != null) {
                read.add(layout.column);
            }
            if (layout.row != null) {
                layout.row.forEach(field -> open.add(field.from));
            }
        }
        return read;
    }

    /**
     * The declared row of each input row by a {@link RowShape} of its columns only: the source's or request step's
     * row (no parse step), or the Python parse step's flat row.
     */
    private static final class Shaped implements MapFunction<RowData, RowData> {
        private static final long serialVersionUID = 1L;
        private final RowShape shape;
        private transient RowShape.Body body;

        Shaped(RowShape shape) {
            if (shape == null) {
                throw new IllegalStateException("dspark-vllm: a column has no layout over the row it is made of; please report it");
            }
            this.shape = shape;
        }

        @Override
        public RowData map(RowData row) {
            if (body == null) {
                body = new RowShape.Body();
            }
            body.in = row;
            body.reason = null;
            body.field = null;
            shape.check(body);
            return shape.row(body);
        }
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
        Plan.TableRequest request = plan.request();
        RequestStep step = new RequestStep(request);
        long timeout = request.timeoutMs;
        int capacity = (int) request.capacity;
        SingleOutputStreamOperator<RowData> out =
                "ordered".equals(request.outputMode)
                        ? AsyncDataStream.orderedWait(prompts, step, timeout, TimeUnit.MILLISECONDS, capacity)
                        : AsyncDataStream.unorderedWait(prompts, step, timeout, TimeUnit.MILLISECONDS, capacity);
        return out.returns(RequestStep.typeInfo()).name("dspark-vllm requests");
    }

    /**
     * The parse step in the JVM straight to the table's declared row ({@link RowShape#declared}) from the source's
     * (or request step's) DataStream: no SQL, no table.
     */
    private static DataStream<RowData> parseToDeclared(
            TablePlan plan, DataStream<RowData> rows, RowType input, List<String> physicalNames,
            List<String> metadataKeys, DataType produced) {
        RowType out = (RowType) produced.getLogicalType();
        RowShape shape = RowShape.declared(out, layouts(plan, physicalNames, metadataKeys), input,
                TablePlan.madeTypes(plan.plan.nativeValue), plan.plan.answer);
        if (shape == null) {
            throw new IllegalStateException(
                    "dspark-vllm: a column of " + out + " has no layout the parse step can make; please report it");
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

    /** The parse step's operator on a DataStream of internal rows of {@code inputType}. */
    private static DataStream<RowData> parseStream(
            TablePlan plan, DataStream<RowData> in, RowType inputType, RowShape shape) {
        Plan.NativeParse jvm = plan.plan.nativeValue;
        List<String> inputs = inputType.getFieldNames();
        ParseOperator step =
                new ParseOperator(
                        jvm.document,
                        shape,
                        inputType,
                        inputs.indexOf("_body"),
                        inputs.indexOf("_source_line"),
                        inputs.indexOf("_request_error"),
                        jvm.requireCreated,
                        jvm.batchSize.intValue(),
                        jvm.batchMs,
                        jvm.autoFallback);
        return in.transform("dspark-vllm parse (native core)", InternalTypeInfo.of(shape.type()), step);
    }
}
