package io.dspark.vllm.sql;

import io.dspark.vllm.engine.RowShape;
import io.dspark.vllm.engine.Engine;
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
            stream = uid(Engine.requests(stream, plan.request()), context, "requests");
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
            return Engine.shaped(stream, Engine.shape(
                    (RowType) produced.getLogicalType(), layouts(plan, physicalNames, metadataKeys), type, Map.of(),
                    null));
        }
        Map<String, String> made = producedFlat(plan, flat);
        String python = plan.pythonParseReason(made.keySet());
        if (python == null) {
            return parseToDeclared(plan, stream, type, physicalNames, metadataKeys, produced, config);
        }

        // The parse step in Python (libcudf), then the declared row of its flat row (the input's fields the layouts
        // read, then the flat columns the function makes), as for a metadata-only query.
        requirePython(python);
        List<Plan.Layout> layouts = layouts(plan, physicalNames, metadataKeys);
        DataStream<RowData> parsed = PythonParseStep.parse(plan, stream, type, columnsRead(layouts), made, config, python);
        RowType flatRow = (RowType) ((InternalTypeInfo<RowData>) parsed.getType()).toLogicalType();
        return Engine.shaped(parsed,
                Engine.shape((RowType) produced.getLogicalType(), layouts, flatRow, Map.of(), plan.plan.answer));
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

    /**
     * The parse step in the JVM straight to the table's declared row ({@link RowShape#declared}) from the source's
     * (or request step's) DataStream: no SQL, no table. What the native core reads for the columns the query reads
     * is the planner's ({@link PythonPlanner#tableRead}).
     */
    private static DataStream<RowData> parseToDeclared(
            TablePlan plan, DataStream<RowData> rows, RowType input, List<String> physicalNames,
            List<String> metadataKeys, DataType produced, Map<String, String> config) {
        RowType out = (RowType) produced.getLogicalType();
        Plan.NativeParse parse = plan.plan.nativeValue;
        RowShape shape = Engine.shape(out, layouts(plan, physicalNames, metadataKeys), input, Engine.made(parse),
                plan.plan.answer);
        LOG.info("dspark-vllm: the parse step runs in the JVM (native core) and makes the declared rows");
        Plan.NativeRead read = PythonPlanner.tableRead(plan, physicalNames, metadataKeys, config);
        return Engine.parse(rows, input, parse, read, shape);
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
}
