package io.dspark.vllm.engine;

import io.dspark.vllm.plan.Plan;
import io.dspark.vllm.plan.PlanContract;
import io.dspark.vllm.parse.ArrowColumn;
import io.dspark.vllm.parse.NativeCore;
import io.dspark.vllm.parse.NativeParser;

import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MeterView;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;

import java.io.Serializable;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

/**
 * The parse step's one owner of what a batch of bodies becomes: the native core ({@link NativeParser}) reads the
 * bodies, and each input row gives exactly one output row ({@link RowShape}), parsed or an error row (a rejected
 * body, a NULL body, a failed request: {@code request failed: ...}), with {@code created} filled in where the
 * body has none. The table's {@link ParseOperator} and the model's {@link ModelPredictFunction} batch differently
 * and both hand their batches here.
 *
 * <p>Metrics, group {@code dspark}: numRecordsIn, numRecordsOut, numRecordsInErrors, numBytesIn, numBatches, their
 * rates, parseTimeMsP50/P99, lastBatchParseTimeMs, backendGpu, backendJvm, gpuFallbackBatches, gpuUnused.
 */
final class ParseBatch implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(ParseBatch.class);
    private static final String CREATED = RowShape.CREATED;
    // Said once a TaskManager (the JVM), whatever number of subtasks it runs.
    private static final java.util.concurrent.atomic.AtomicBoolean GPU_UNUSED_SAID =
            new java.util.concurrent.atomic.AtomicBoolean();
    /** Flink's external resource of GPU TaskManagers (docker/flink-conf/gpu.yaml). */
    static final String GPU_RESOURCE = "gpu";

    private final Plan.NativeRead read; // what the core reads (the planner's, for this shape)
    private final RowShape shape;
    private final boolean hasCreated;
    private final int bodyIndex;
    private final int lineIndex; // replay: the body's line in its file (FileLines'); else -1: responses counted
    private final int requestErrorIndex; // request mode: the request's error; else -1
    private final boolean requireCreated;
    private final String gpuUnused; // 'auto' here: what a TaskManager with a GPU says (the plan's), else null

    private transient NativeParser parser;
    private transient long responses;
    private transient Long lastCreated;
    private transient Counter bodies;
    private transient Counter parsed;
    private transient Counter rejected;
    private transient Counter bytes;
    private transient Counter batches;
    private transient Counter fallbacks;
    private transient io.dspark.vllm.request.Recent parseTimes;
    private transient double lastMillis;

    ParseBatch(
            Plan.NativeRead read, RowShape shape, int bodyIndex, int lineIndex, int requestErrorIndex,
            boolean requireCreated, String gpuUnused) {
        // Here, where the job is built: a plan that does not read a column the row binds is refused at once.
        new NativeParser(read).require(shape.coreColumns());
        this.read = read;
        this.shape = shape;
        this.hasCreated = shape.coreColumns().contains(CREATED);
        this.bodyIndex = bodyIndex;
        this.lineIndex = lineIndex;
        this.requestErrorIndex = requestErrorIndex;
        this.requireCreated = requireCreated;
        this.gpuUnused = gpuUnused;
    }

    RowShape shape() {
        return shape;
    }

    /**
     * Whether this TaskManager has a GPU: Flink gave it the external resource {@code gpu}, or the NVIDIA driver
     * shows a device (a GPU the job's configuration does not declare).
     */
    static boolean gpuHere(java.util.Set<org.apache.flink.api.common.externalresource.ExternalResourceInfo> given) {
        if (given != null && !given.isEmpty()) {
            return true;
        }
        String[] devices = new java.io.File("/proc/driver/nvidia/gpus").list();
        return devices != null && devices.length > 0;
    }

    /**
     * Loads the native core and registers the metrics in {@code group} (the operator's, or the function's);
     * {@code gpuHere}: this TaskManager has a GPU ({@link #gpuHere}), which 'auto' in the JVM leaves unused.
     */
    void open(MetricGroup operatorGroup, boolean sayWhere, boolean gpuHere) {
        String problem = NativeCore.available();
        if (problem != null) {
            throw new IllegalStateException("dspark-vllm: " + problem);
        }
        parser = new NativeParser(read);
        MetricGroup group = operatorGroup.addGroup(PlanContract.GROUP);
        bodies = group.counter(PlanContract.NUM_RECORDS_IN);
        parsed = group.counter(PlanContract.NUM_RECORDS_OUT);
        rejected = group.counter(PlanContract.NUM_RECORDS_IN_ERRORS);
        bytes = group.counter(PlanContract.NUM_BYTES_IN);
        batches = group.counter(PlanContract.NUM_BATCHES);
        group.meter(PlanContract.NUM_RECORDS_IN_PER_SECOND, new MeterView(bodies, 60));
        group.meter(PlanContract.NUM_RECORDS_OUT_PER_SECOND, new MeterView(parsed, 60));
        parseTimes = new io.dspark.vllm.request.Recent(100);
        group.gauge(PlanContract.PARSE_TIME_MS_P50, () -> parseTimes.percentile(50));
        group.gauge(PlanContract.PARSE_TIME_MS_P99, () -> parseTimes.percentile(99));
        group.gauge(PlanContract.LAST_BATCH_PARSE_TIME_MS, () -> (long) lastMillis);
        group.gauge(PlanContract.BACKEND_GPU, () -> 0);
        group.gauge(PlanContract.BACKEND_JVM, () -> 1);
        fallbacks = group.counter(PlanContract.GPU_FALLBACK_BATCHES);
        boolean unused = gpuUnused != null && gpuHere;
        group.gauge(PlanContract.GPU_UNUSED, () -> unused ? 1 : 0);
        if (sayWhere) {
            LOG.info("dspark-vllm: the parse step runs in the JVM with the native core ({}), no Python worker",
                    NativeCore.coreName());
        }
        if (unused && GPU_UNUSED_SAID.compareAndSet(false, true)) {
            LOG.warn("dspark-vllm: this TaskManager has a GPU, but {}", gpuUnused);
        }
    }

    /** Parses the bodies of {@code pending} in one call and hands one row per input row to {@code emit}, in order. */
    void parse(List<RowData> pending, Consumer<RowData> emit) {
        int n = pending.size();
        if (n == 0) {
            return;
        }
        byte[][] input = new byte[n][];
        long size = 0;
        for (int i = 0; i < n; i++) {
            RowData row = pending.get(i);
            input[i] = row.isNullAt(bodyIndex) ? null : row.getBinary(bodyIndex);
            size += input[i] == null ? 0 : input[i].length;
        }
        long started = System.nanoTime();
        List<Map<String, ArrowColumn>> parts;
        try {
            parts = parser.parse(input, 0, n);
        } catch (RuntimeException e) { // a defect of ours costs this batch's rows their values, never the job
            LOG.error("dspark-vllm: the native core could not read a batch of {} bodies; they are error rows", n, e);
            parts = null;
        }
        RowShape.Body b = new RowShape.Body();
        if (parts == null) {
            StringData internal = StringData.fromString(
                    "internal error (the native core could not read this batch); please report it with this body");
            for (RowData in : pending) {
                b.in = in;
                b.line = shape.needsLine() ? line(in) : 0;
                b.reason = internal;
                b.field = null;
                b.answer = null;
                // as for any error row: the newest time so far (replay) or now (request)
                b.hasCreated = hasCreated;
                b.created = requestErrorIndex >= 0 ? System.currentTimeMillis() : (lastCreated != null ? lastCreated : 0L);
                emit.accept(shape.row(b));
            }
            rejected.inc(n);
            bodies.inc(n); // last: whoever reads numRecordsIn finds its bodies counted as rows or errors already
            return;
        }
        lastMillis = (System.nanoTime() - started) / 1e6;
        parseTimes.add(lastMillis);
        long now = System.currentTimeMillis();
        long floor = lastCreated != null ? lastCreated : 0L;
        long running = Long.MIN_VALUE;
        int at = 0;
        int errors = 0;
        for (Map<String, ArrowColumn> part : parts) {
            ArrowColumn reasons = part.get(NativeParser.REASON);
            ArrowColumn fields = part.get(NativeParser.FIELD);
            ArrowColumn created = hasCreated ? part.get(CREATED) : null;
            b.columns = shape.bind(part);
            for (int i = 0; i < reasons.length; i++, at++) {
                RowData in = pending.get(at);
                String reason = reasons.getString(i);
                String field = fields.getString(i);
                if (input[at] == null) {
                    reason = "not a body: got NoneType (give bytes or str)";
                    field = null;
                }
                if (requestErrorIndex >= 0 && !in.isNullAt(requestErrorIndex)) {
                    reason = "request failed: " + in.getString(requestErrorIndex).toString();
                    field = null;
                }
                b.hasCreated = false;
                if (created != null) {
                    if (created.isNull(i)) {
                        if (requireCreated && reason == null) {
                            reason = "no 'created' in the body: the table's WATERMARK needs it";
                            field = CREATED;
                        }
                        long filled = requestErrorIndex >= 0 ? now : Math.max(running, floor);
                        b.hasCreated = true;
                        b.created = filled;
                        lastCreated = lastCreated == null ? filled : Math.max(lastCreated, filled);
                    } else {
                        long value = created.getLong(i);
                        running = Math.max(running, value);
                        lastCreated = lastCreated == null ? value : Math.max(lastCreated, value);
                    }
                }
                b.i = i;
                b.in = in;
                b.line = shape.needsLine() ? line(in) : 0;
                b.reason = reason == null ? null : StringData.fromString(reason);
                b.field = field == null ? null : StringData.fromString(field);
                errors += shape.check(b) ? 1 : 0;
                emit.accept(shape.row(b));
            }
        }
        parsed.inc(n - errors);
        rejected.inc(errors);
        bodies.inc(n); // last: whoever reads numRecordsIn finds its bodies counted as rows or errors already
        bytes.inc(size);
        batches.inc();
        if (gpuUnused != null) { // 'auto' parsed on the CPU
            fallbacks.inc();
        }
    }

    /** 'source.line': the body's line in its file (replay), or the response's number in this subtask. */
    private long line(RowData in) {
        return lineIndex >= 0 ? in.getLong(lineIndex) : ++responses;
    }
}
