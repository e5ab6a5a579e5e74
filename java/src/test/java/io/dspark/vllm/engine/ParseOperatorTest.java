package io.dspark.vllm.engine;

import org.apache.flink.api.common.externalresource.ExternalResourceInfo;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.runtime.typeutils.RowDataSerializer;
import org.apache.flink.table.types.logical.BigIntType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.VarBinaryType;
import org.apache.flink.table.types.logical.VarCharType;

import io.dspark.vllm.parse.PythonPlan;
import io.dspark.vllm.plan.PlanContract;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The parse step's batching against Flink's checkpoints, watermarks, timers and the end of its input, in Flink's
 * operator test harness (flink-streaming-java's test jar, deploy/maven/flink-test-harness.pom.xml): the bodies a
 * batch holds leave before the barrier, before the watermark, at the batch's time and at the end, so a checkpoint
 * never has a body in flight and the operator keeps no state. The plan is the Python planner's
 * (io.dspark.vllm.parse.PythonPlan).
 */
@Timeout(60)
final class ParseOperatorTest {
    private static final int BODY = 0;
    private static final long BATCH_MILLIS = 5_000;
    private static io.dspark.vllm.plan.Plan.NativeRead plan;
    private static RowShape shape;
    private static RowType input;

    @BeforeAll
    static void plan() throws Exception {
        plan = PythonPlan.of("openai");
        input = RowType.of(new LogicalType[] {new VarBinaryType(VarBinaryType.MAX_LENGTH)}, new String[] {"_body"});
        shape = Shapes.idAndInternal(input);
    }

    private static OneInputStreamOperatorTestHarness<RowData, RowData> harness(int batchSize) throws Exception {
        ParseOperator step = new ParseOperator(
                new ParseBatch(plan, shape, BODY, -1, -1, false, null), input, batchSize, BATCH_MILLIS);
        OneInputStreamOperatorTestHarness<RowData, RowData> h = new OneInputStreamOperatorTestHarness<>(step);
        h.setup(new RowDataSerializer(shape.type()));
        h.open();
        return h;
    }

    private static void body(OneInputStreamOperatorTestHarness<RowData, RowData> h, String text) throws Exception {
        h.processElement(new StreamRecord<>(GenericRowData.of((Object) text.getBytes(StandardCharsets.UTF_8))));
    }

    /** What the operator sent: "id:<id>" for a row, "error:<reason>" for an error row, "watermark:<ts>". */
    @SuppressWarnings("unchecked")
    private static List<String> sent(OneInputStreamOperatorTestHarness<RowData, RowData> h) {
        List<String> out = new ArrayList<>();
        int error = shape.type().getFieldNames().indexOf("_error");
        for (Object o : h.getOutput()) {
            if (o instanceof Watermark) {
                out.add("watermark:" + ((Watermark) o).getTimestamp());
            } else {
                RowData row = ((StreamRecord<RowData>) o).getValue();
                out.add(row.isNullAt(error) ? "id:" + row.getString(0) : "error:" + row.getString(error));
            }
        }
        h.getOutput().clear();
        return out;
    }

    @Test
    void aBatchLeavesBeforeTheCheckpointBarrierAndNoStateIsKept() throws Exception {
        try (OneInputStreamOperatorTestHarness<RowData, RowData> h = harness(1000)) {
            body(h, "{\"id\": \"a\"}");
            body(h, "{\"id\": ");
            body(h, "{\"id\": \"b\"}");
            assertEquals(List.of(), sent(h), "held in the batch");
            h.prepareSnapshotPreBarrier(1);
            List<String> out = sent(h);
            assertEquals(3, out.size(), out.toString());
            assertEquals("id:a", out.get(0));
            assertTrue(out.get(1).startsWith("error:truncated JSON"), out.get(1));
            assertEquals("id:b", out.get(2));
            OperatorSubtaskState state = h.snapshot(1, 1);
            assertNotNull(state);
            assertEquals(0, state.getManagedOperatorState().size(), "no operator state");
            assertEquals(0, state.getManagedKeyedState().size(), "no keyed state");
        }
    }

    @Test
    void aBodysLineIsTheOneItsSourceGaveIt() throws Exception {
        RowType in = RowType.of(new LogicalType[] {new VarBinaryType(VarBinaryType.MAX_LENGTH), new BigIntType()},
                new String[] {"_body", "_source_line"});
        RowShape lined = Shapes.idAndInternal(in);
        ParseOperator step = new ParseOperator(
                new ParseBatch(plan, lined, 0, 1, -1, false, null), in, 1000, BATCH_MILLIS);
        try (OneInputStreamOperatorTestHarness<RowData, RowData> h = new OneInputStreamOperatorTestHarness<>(step)) {
            h.setup(new RowDataSerializer(lined.type()));
            h.open();
            // a restored file source goes on at line 3001: so does source.line (the step counted from 1 again)
            h.processElement(new StreamRecord<>(GenericRowData.of("{\"id\": \"a\"}".getBytes(StandardCharsets.UTF_8), 3001L)));
            h.prepareSnapshotPreBarrier(1);
            @SuppressWarnings("unchecked")
            RowData row = ((StreamRecord<RowData>) h.getOutput().poll()).getValue();
            assertEquals(3001L, row.getLong(lined.type().getFieldNames().indexOf("_line")));
        }
    }

    @Test
    void aBatchLeavesBeforeTheWatermarkThatFollowsIt() throws Exception {
        try (OneInputStreamOperatorTestHarness<RowData, RowData> h = harness(1000)) {
            body(h, "{\"id\": \"a\"}");
            body(h, "{\"id\": \"b\"}");
            h.processWatermark(new Watermark(10));
            assertEquals(List.of("id:a", "id:b", "watermark:10"), sent(h));
        }
    }

    @Test
    void aBatchLeavesAtItsTimeOrWhenFull() throws Exception {
        try (OneInputStreamOperatorTestHarness<RowData, RowData> h = harness(2)) {
            h.setProcessingTime(0);
            body(h, "{\"id\": \"a\"}");
            h.setProcessingTime(BATCH_MILLIS - 1);
            assertEquals(List.of(), sent(h), "before its time");
            h.setProcessingTime(BATCH_MILLIS);
            assertEquals(List.of("id:a"), sent(h), "at its time");
            body(h, "{\"id\": \"b\"}");
            body(h, "{\"id\": \"c\"}");
            assertEquals(List.of("id:b", "id:c"), sent(h), "full at 2");
        }
    }

    @Test
    void theLastBatchLeavesAtTheEndOfTheInput() throws Exception {
        try (OneInputStreamOperatorTestHarness<RowData, RowData> h = harness(1000)) {
            body(h, "{\"id\": \"a\"}");
            body(h, "[]");
            h.endInput();
            List<String> out = sent(h);
            assertEquals("id:a", out.get(0));
            assertTrue(out.get(1).startsWith("error:"), out.toString());
            assertEquals(2, out.size());
        }
    }

    @Test
    void aNullBodyIsAnErrorRowOfItsOwn() throws Exception {
        try (OneInputStreamOperatorTestHarness<RowData, RowData> h = harness(1000)) {
            h.processElement(new StreamRecord<>(GenericRowData.of((Object) null)));
            body(h, "{\"id\": \"a\"}");
            h.endInput();
            assertEquals(List.of("error:not a body: got NoneType (give bytes or str)", "id:a"), sent(h));
        }
    }

    /**
     * 'auto' planned in the JVM (no GPU TaskManagers declared) on a TaskManager that has a GPU: the parse step
     * shows it in gauge gpuUnused (and says it once); elsewhere, or with 'cpu', the gauge is 0.
     */
    @Test
    void autoInTheJvmOnATaskManagerWithAGpuShowsTheGpuUnused() {
        ExternalResourceInfo gpu = new ExternalResourceInfo() {
            @Override
            public java.util.Optional<String> getProperty(String key) {
                return java.util.Optional.of("0");
            }

            @Override
            public java.util.Collection<String> getKeys() {
                return List.of("index");
            }
        };
        assertTrue(ParseBatch.gpuHere(java.util.Set.of(gpu)));
        String said = "'parse.backend' = 'auto' and the job's configuration declares no GPU TaskManagers";
        assertEquals(1, gpuUnused(said, true));
        assertEquals(0, gpuUnused(said, false));
        assertEquals(0, gpuUnused(null, true)); // 'cpu'
    }

    private static Object gpuUnused(String said, boolean gpuHere) {
        Map<String, Gauge<?>> gauges = new HashMap<>();
        MetricGroup group = new UnregisteredMetricsGroup() {
            @Override
            public <T, G extends Gauge<T>> G gauge(String name, G gauge) {
                gauges.put(name, gauge);
                return gauge;
            }

            @Override
            public MetricGroup addGroup(String name) {
                return this;
            }
        };
        new ParseBatch(plan, shape, BODY, -1, -1, false, said).open(group, false, gpuHere);
        return gauges.get(PlanContract.GPU_UNUSED).getValue();
    }
}
