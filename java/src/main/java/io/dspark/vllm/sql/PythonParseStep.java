package io.dspark.vllm.sql;

import io.dspark.vllm.engine.SqlTypes;
import org.apache.flink.api.common.cache.DistributedCache;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.core.memory.ManagedMemoryUseCase;
import org.apache.flink.python.PythonOptions;
import org.apache.flink.python.util.PythonConfigUtil;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.binary.BinaryRowData;
import org.apache.flink.table.data.utils.JoinedRowData;
import org.apache.flink.table.data.utils.ProjectedRowData;
import org.apache.flink.table.functions.python.PythonEnv;
import org.apache.flink.table.functions.python.PythonFunctionInfo;
import org.apache.flink.table.functions.python.PythonFunctionKind;
import org.apache.flink.table.functions.python.PythonScalarFunction;
import org.apache.flink.table.runtime.generated.GeneratedProjection;
import org.apache.flink.table.runtime.generated.Projection;
import org.apache.flink.table.runtime.operators.python.scalar.arrow.ArrowPythonScalarFunctionOperator;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.runtime.typeutils.RowDataSerializer;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.IntStream;

/**
 * The parse step in a Python worker (the gpu path: libcudf's API is Python), put on the scan's DataStream as it is:
 * Flink's own operator for vectorized (pandas/Arrow) Python scalar functions, {@link
 * ArrowPythonScalarFunctionOperator}, calls the table's parse function ({@link PythonPlanner#parseFunction}) on
 * batches of the input rows. No table environment and no conversion between tables and streams: this class does
 * what Flink's planner does around that operator ({@code CommonExecPythonCalc}): the Python configuration (the
 * job's {@code python.*} options and the plan's bundle and Arrow batch sizes), the Python files and archives the
 * job ships, the managed memory its Python worker uses, and the two projections the operator takes (a few lines of
 * source that Flink compiles as it compiles the planner's generated code, handing each row to {@link Fields}). No
 * class of Flink's planner is used: it is loaded in a class loader of its own.
 *
 * <p>The rows out are the input row's fields that are read after it, then the flat columns the function makes (in
 * {@code produced}'s order).
 */
final class PythonParseStep {

    static final String FUNCTION = "__dspark_parse";

    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(PythonParseStep.class);

    private PythonParseStep() {}

    /**
     * The parse step on {@code rows} (internal rows of {@code input}): each row out is the row in's fields named in
     * {@code forwarded} (in the input's order: the ones the declared row reads; every copy of a row between
     * operators copies them, a body too), then the {@code produced} flat columns (name -> Flink SQL type).
     * {@code config} is the job's configuration (the table config of the query), {@code reason} why the parse step
     * runs in Python.
     */
    static DataStream<RowData> parse(
            TablePlan plan, DataStream<RowData> rows, RowType input, Set<String> forwarded,
            Map<String, String> produced, Map<String, String> config, String reason) {
        LOG.info("dspark-vllm: the parse step runs in a Python worker: {}", reason);
        List<String[]> inputs = new ArrayList<>();
        plan.plan.parseInputs.forEach(pair -> inputs.add(new String[] {pair.name, pair.type}));
        List<String> inputTypes = new ArrayList<>();
        int[] read = new int[inputs.size()];
        Object[] arguments = new Object[inputs.size()];
        for (int i = 0; i < inputs.size(); i++) {
            read[i] = input.getFieldIndex(inputs.get(i)[0]);
            if (read[i] < 0) {
                throw new IllegalStateException(
                        "dspark-vllm: the parse function reads '" + inputs.get(i)[0] + "', which the scan's rows "
                                + "lack (" + input + "); the plan and the jar are of different releases?");
            }
            inputTypes.add(inputs.get(i)[1]);
            arguments[i] = i;
        }
        RowType made = (RowType) SqlTypes.row(produced).getLogicalType();
        PythonScalarFunction function =
                new PythonScalarFunction(
                        FUNCTION,
                        PythonPlanner.parseFunction(plan, new ArrayList<>(produced.keySet()), config),
                        inputTypes.toArray(new String[0]),
                        made.asSerializableString(),
                        PythonFunctionKind.PANDAS,
                        true,
                        false,
                        new PythonEnv(PythonEnv.ExecType.PROCESS));

        int[] kept = IntStream.range(0, input.getFieldCount())
                .filter(i -> forwarded.contains(input.getFieldNames().get(i))).toArray();
        RowType udfInput = project(input, read);
        RowType udfOutput = RowType.of(new LogicalType[] {made}, new String[] {"_p"});
        Configuration python = pythonConfig(config, plan.settings(), rows.getExecutionEnvironment());
        ArrowPythonScalarFunctionOperator operator =
                new ArrowPythonScalarFunctionOperator(
                        python,
                        new PythonFunctionInfo[] {new PythonFunctionInfo(function, arguments)},
                        input,
                        udfInput,
                        udfOutput,
                        Fields.generated("DsparkVllmParseInput", input, read),
                        Fields.generated("DsparkVllmParseForwarded", input, kept));

        List<RowType.RowField> called = new ArrayList<>(project(input, kept).getFields());
        called.addAll(udfOutput.getFields());
        SingleOutputStreamOperator<RowData> out =
                rows.transform("dspark-vllm parse (Python)", InternalTypeInfo.of(new RowType(called)), operator);
        if (python.get(PythonOptions.USE_MANAGED_MEMORY)) {
            out.getTransformation().declareManagedMemoryUseCaseAtSlotScope(ManagedMemoryUseCase.PYTHON);
        }
        List<RowType.RowField> flat = new ArrayList<>(project(input, kept).getFields());
        flat.addAll(made.getFields());
        RowType flatType = new RowType(flat);
        return out.map(new Flatten(kept.length, made.getFieldCount()), InternalTypeInfo.of(flatType))
                .name("dspark-vllm parse (flat columns)");
    }

    /**
     * The operator's Python configuration, as Flink's planner makes it ({@code PythonConfigUtil
     * .extractPythonConfiguration}): the job's options with the plan's settings over them (bundle size and time,
     * Arrow batch size: this table's operator only, {@code settings}). The Python files and archives of the job
     * ('python.files', 'python.archives', 'python.requirements') become cached files there, which are registered
     * with the job ({@code env}).
     */
    static Configuration pythonConfig(
            Map<String, String> config, Map<String, String> settings, StreamExecutionEnvironment env) {
        Configuration job = new Configuration();
        job.addAll(Configuration.fromMap(config));
        job.addAll(Configuration.fromMap(settings));
        Configuration python = PythonConfigUtil.extractPythonConfiguration(job);
        shipPythonFiles(job.get(PipelineOptions.CACHED_FILES), env);
        return python;
    }

    /**
     * The cached files of the Python dependencies ({@code cached}: 'pipeline.cached-files' entries) registered
     * with the job. The planner hands a source a read-only wrapper of the job's environment, whose
     * registerCachedFile refuses; its getCachedFiles() is the environment's own list (public API), so they are
     * added to it.
     */
    private static void shipPythonFiles(List<String> cached, StreamExecutionEnvironment env) {
        if (cached == null || cached.isEmpty()) {
            return;
        }
        List<Tuple2<String, DistributedCache.DistributedCacheEntry>> files = env.getCachedFiles();
        Set<String> known = new LinkedHashSet<>();
        files.forEach(f -> known.add(f.f0));
        for (Tuple2<String, DistributedCache.DistributedCacheEntry> file :
                DistributedCache.parseCachedFilesFromString(cached)) {
            if (known.add(file.f0)) {
                try {
                    files.add(file);
                } catch (UnsupportedOperationException e) {
                    throw new IllegalStateException(
                            "dspark-vllm cannot ship the Python files of its functions ('python.files', "
                                    + "'python.archives') with this job; install dspark-vllm in the workers' Python "
                                    + "('python.executable') instead.", e);
                }
            }
        }
    }

    private static RowType project(RowType type, int[] fields) {
        List<RowType.RowField> kept = new ArrayList<>();
        for (int field : fields) {
            kept.add(type.getFields().get(field));
        }
        return new RowType(kept);
    }

    /**
     * Some fields of a row as a binary row (what the operator's projections give: it copies the forwarded ones,
     * and writes the function's input to Arrow at once). The operator takes a {@link GeneratedProjection}, code
     * that Flink compiles on the TaskManager and calls with its references: {@link #generated} is a few lines that
     * hand each row to an instance of this class, its one reference.
     */
    public static final class Fields implements Projection<RowData, BinaryRowData>, Serializable {
        private static final long serialVersionUID = 1L;

        private final RowType type;
        private final int[] fields;
        private transient RowData.FieldGetter[] getters;
        private transient GenericRowData row;
        private transient RowDataSerializer serializer;

        Fields(RowType input, int[] fields) {
            this.type = project(input, fields);
            this.fields = fields;
        }

        static GeneratedProjection generated(String name, RowType input, int[] fields) {
            String projection = Projection.class.getName();
            String rowData = RowData.class.getName();
            String code = "public final class " + name + " implements " + projection + " {\n"
                    + "  private final " + projection + " fields;\n"
                    + "  public " + name + "(Object[] references) { fields = (" + projection + ") references[0]; }\n"
                    + "  public " + rowData + " apply(" + rowData + " row) { return fields.apply(row); }\n"
                    + "}\n";
            return new GeneratedProjection(name, code, new Object[] {new Fields(input, fields)});
        }

        @Override
        public BinaryRowData apply(RowData input) {
            if (getters == null) {
                getters = new RowData.FieldGetter[fields.length];
                for (int i = 0; i < fields.length; i++) {
                    getters[i] = RowData.createFieldGetter(type.getTypeAt(i), fields[i]);
                }
                row = new GenericRowData(fields.length);
                serializer = new RowDataSerializer(type);
            }
            for (int i = 0; i < getters.length; i++) {
                row.setField(i, getters[i].getFieldOrNull(input));
            }
            return serializer.toBinaryRow(row);
        }
    }

    /** The operator's row (the forwarded fields, then one ROW of the flat columns) as one flat row. */
    static final class Flatten implements MapFunction<RowData, RowData> {
        private static final long serialVersionUID = 1L;

        private final int[] input;
        private final int made;

        Flatten(int input, int made) {
            this.input = IntStream.range(0, input).toArray();
            this.made = made;
        }

        @Override
        public RowData map(RowData called) {
            RowData fields = ProjectedRowData.from(input).replaceRow(called);
            return new JoinedRowData(called.getRowKind(), fields, called.getRow(input.length, made));
        }
    }
}
