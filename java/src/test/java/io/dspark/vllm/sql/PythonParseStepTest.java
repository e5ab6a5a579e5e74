package io.dspark.vllm.sql;

import org.apache.flink.api.common.cache.DistributedCache;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.python.PythonOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.data.binary.BinaryRowData;
import org.apache.flink.table.runtime.generated.Projection;
import org.apache.flink.table.types.logical.BigIntType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.VarCharType;

import java.io.File;
import java.nio.file.Files;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What {@link PythonParseStep} does around Flink's Arrow Python operator in place of Flink's planner: the Python
 * configuration (the plan's settings over the job's), the job's Python files shipped with the job, the two
 * projections compiled as Flink compiles generated code, and the operator's row made flat. The operator with a
 * Python worker runs in tests/test_flink_parse.py (the gpu route).
 */
@Timeout(60)
final class PythonParseStepTest {

    @TempDir
    File folder;

    private static final RowType INPUT = RowType.of(
            new LogicalType[] {new VarCharType(VarCharType.MAX_LENGTH), new BigIntType(), new VarCharType(10)},
            new String[] {"_body", "_line", "_source"});

    @Test
    void thePlansSettingsOverTheJobsAndTheJobsPythonFilesShipped() throws Exception {
        File module = new File(folder, "helper.py");
        Files.writeString(module.toPath(), "X = 1\n");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        Configuration python = PythonParseStep.pythonConfig(
                Map.of("python.files", module.getPath(), "python.fn-execution.bundle.size", "7",
                        "python.executable", "/opt/worker/python", "parallelism.default", "3"),
                Map.of("python.fn-execution.bundle.size", "50000", "python.fn-execution.arrow.batch.size", "10000"),
                env);
        assertEquals(50000, python.get(PythonOptions.MAX_BUNDLE_SIZE));
        assertEquals(10000, python.get(PythonOptions.MAX_ARROW_BATCH_SIZE));
        assertEquals("/opt/worker/python", python.get(PythonOptions.PYTHON_EXECUTABLE));
        // The worker finds the file by the name it is cached under; the job registers it under that name.
        Map<String, String> files = python.get(PythonOptions.PYTHON_FILES_DISTRIBUTED_CACHE_INFO);
        assertEquals(1, files.size(), files.toString());
        String key = files.keySet().iterator().next();
        Map<String, String> cached = env.getCachedFiles().stream()
                .collect(Collectors.toMap(f -> f.f0, f -> f.f1.filePath));
        assertEquals(module.getPath(), cached.get(key), cached.toString());

        // Planned twice (a second query over the table): the file is registered once.
        PythonParseStep.pythonConfig(Map.of("python.files", module.getPath()), Map.of(), env);
        List<Tuple2<String, DistributedCache.DistributedCacheEntry>> again = env.getCachedFiles();
        assertEquals(1, again.size(), again.toString());
    }

    @Test
    void theProjectionsCompileAsFlinksGeneratedCodeAndGiveBinaryRows() {
        ClassLoader loader = Thread.currentThread().getContextClassLoader();
        @SuppressWarnings("unchecked")
        Projection<RowData, BinaryRowData> input =
                PythonParseStep.Fields.generated("TestInput", INPUT, new int[] {2, 0}).newInstance(loader);
        @SuppressWarnings("unchecked")
        Projection<RowData, BinaryRowData> all =
                PythonParseStep.Fields.generated("TestAll", INPUT, new int[] {0, 1, 2}).newInstance(loader);
        GenericRowData row = GenericRowData.of(StringData.fromString("{\"id\": 1}"), 42L, null);
        BinaryRowData projected = input.apply(row);
        assertEquals(2, projected.getArity());
        assertTrue(projected.isNullAt(0));
        assertEquals("{\"id\": 1}", projected.getString(1).toString());
        // The operator keeps a copy of the forwarded fields until the bundle's results come back.
        BinaryRowData forwarded = all.apply(row).copy();
        all.apply(GenericRowData.of(StringData.fromString("other"), 7L, StringData.fromString("b.jsonl")));
        assertEquals(42L, forwarded.getLong(1));
        assertEquals("{\"id\": 1}", forwarded.getString(0).toString());
    }

    @Test
    void theOperatorsRowMadeFlat() throws Exception {
        GenericRowData made = GenericRowData.of(StringData.fromString("cmpl-1"), 12L);
        GenericRowData called = GenericRowData.of(StringData.fromString("{}"), 3L, null, made);
        RowData flat = new PythonParseStep.Flatten(3, 2).map(called);
        assertInstanceOf(RowData.class, flat);
        assertEquals(5, flat.getArity());
        assertEquals("{}", flat.getString(0).toString());
        assertEquals(3L, flat.getLong(1));
        assertTrue(flat.isNullAt(2));
        assertEquals("cmpl-1", flat.getString(3).toString());
        assertEquals(12L, flat.getLong(4));
    }
}
