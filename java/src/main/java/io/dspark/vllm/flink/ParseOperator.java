package io.dspark.vllm.flink;

import io.dspark.vllm.parse.ArrowColumn;
import io.dspark.vllm.parse.NativeCore;
import io.dspark.vllm.parse.NativeParser;

import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MeterView;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.BoundedOneInput;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.runtime.typeutils.RowDataSerializer;
import org.apache.flink.table.types.logical.RowType;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The parse step inside the JVM: batches of bodies through the native core ({@link NativeParser}). Each output
 * row is assembled by a {@link RowShape}: the table's declared row itself, or the flat row (the input columns
 * the metadata reads, the flat columns and the internal ones, as the Python parse function makes them:
 * connector/flink/frames.py, {@code to_table}) that SQL turns into it; as a binary row (cheap to copy between
 * chained operators).
 *
 * <p>A batch is parsed when it holds {@code batchSize} bodies, {@code batchMillis} after its first body came,
 * before a checkpoint barrier or a watermark goes on, and at the end of the input: a body never waits longer.
 */
final class ParseOperator extends AbstractStreamOperator<RowData>
        implements OneInputStreamOperator<RowData, RowData>, BoundedOneInput, ProcessingTimeCallback {

    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(ParseOperator.class);
    private static final String CREATED = RowShape.CREATED;
    private static final java.util.concurrent.atomic.AtomicBoolean FALLBACK_SAID =
            new java.util.concurrent.atomic.AtomicBoolean();

    private final String document;
    private final RowShape shape;
    private final RowType inputType;
    private final boolean hasCreated;
    private final int bodyIndex;
    private final int sourceIndex; // replay: the file a body came from (lines are counted per file); else -1
    private final int requestErrorIndex; // request mode: the request's error; else -1
    private final boolean requireCreated;
    private final int batchSize;
    private final long batchMillis;
    private final String autoFallback; // 'auto' without a GPU backend: why the CPU parses (else null)

    private transient NativeParser parser;
    private transient StreamRecord<RowData> record;
    private transient RowDataSerializer copyInput; // with object reuse
    private transient String lastSource;
    private transient StringData lastSourceData;
    private transient List<RowData> pending;
    private transient long timer;
    private transient Map<String, Long> lines;
    private transient Long lastCreated;
    private transient Counter bodies;
    private transient Counter parsed;
    private transient Counter rejected;
    private transient Counter bytes;
    private transient Counter batches;
    private transient Counter fallbacks;
    private transient RequestStep.Recent parseTimes;
    private transient double lastMillis;

    ParseOperator(
            String document, RowShape shape, RowType inputType, int bodyIndex, int sourceIndex,
            int requestErrorIndex, boolean requireCreated, int batchSize, long batchMillis, String autoFallback) {
        this.document = document;
        this.shape = shape;
        this.inputType = inputType;
        this.hasCreated = shape.coreColumns().contains(CREATED);
        this.bodyIndex = bodyIndex;
        this.sourceIndex = sourceIndex;
        this.requestErrorIndex = requestErrorIndex;
        this.requireCreated = requireCreated;
        this.batchSize = batchSize;
        this.batchMillis = batchMillis;
        this.autoFallback = autoFallback;
    }

    @Override
    public void open() throws Exception {
        super.open();
        String problem = NativeCore.available();
        if (problem != null) {
            throw new IllegalStateException("dspark-vllm: " + problem);
        }
        parser = new NativeParser(document, shape.coreColumns());
        record = new StreamRecord<>(null);
        copyInput = getExecutionConfig().isObjectReuseEnabled() ? new RowDataSerializer(inputType) : null;
        pending = new ArrayList<>();
        timer = -1;
        lines = new HashMap<>();
        MetricGroup group = getRuntimeContext().getMetricGroup().addGroup("dspark");
        bodies = group.counter("numRecordsIn");
        parsed = group.counter("numRecordsOut");
        rejected = group.counter("numRecordsInErrors");
        bytes = group.counter("numBytesIn");
        batches = group.counter("numBatches");
        group.meter("numRecordsInPerSecond", new MeterView(bodies, 60));
        group.meter("numRecordsOutPerSecond", new MeterView(parsed, 60));
        parseTimes = new RequestStep.Recent(100);
        group.gauge("parseTimeMsP50", () -> parseTimes.percentile(50));
        group.gauge("parseTimeMsP99", () -> parseTimes.percentile(99));
        group.gauge("lastBatchParseTimeMs", () -> (long) lastMillis);
        group.gauge("backendGpu", () -> 0);
        group.gauge("backendJvm", () -> 1);
        fallbacks = group.counter("gpuFallbackBatches");
        if (getRuntimeContext().getTaskInfo().getIndexOfThisSubtask() == 0) {
            LOG.info("dspark-vllm: the parse step runs in the JVM with the native core ({}), no Python worker",
                    NativeCore.coreName());
        }
        if (autoFallback != null && FALLBACK_SAID.compareAndSet(false, true)) {
            LOG.warn("parse backend 'auto' uses the CPU: {}", autoFallback);
        }
    }

    @Override
    public void processElement(StreamRecord<RowData> element) throws Exception {
        // A batch holds its rows past this call: with object reuse, Flink hands the same object again.
        RowData row = element.getValue();
        pending.add(copyInput != null ? copyInput.copy(row) : row);
        if (pending.size() >= batchSize) {
            flush();
        } else if (timer < 0) {
            long now = getProcessingTimeService().getCurrentProcessingTime();
            timer = now + batchMillis;
            getProcessingTimeService().registerTimer(timer, this);
        }
    }

    @Override
    public void onProcessingTime(long time) throws Exception {
        if (time == timer) {
            timer = -1;
            flush();
        }
    }

    @Override
    public void processWatermark(Watermark mark) throws Exception {
        flush();
        super.processWatermark(mark);
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        flush();
        super.prepareSnapshotPreBarrier(checkpointId);
    }

    @Override
    public void endInput() throws Exception {
        flush();
    }

    @Override
    public void finish() throws Exception {
        flush();
        super.finish();
    }

    private void flush() {
        timer = -1;
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
                // as for any error row: the newest time so far (replay) or now (request)
                b.hasCreated = hasCreated;
                b.created = requestErrorIndex >= 0 ? System.currentTimeMillis() : (lastCreated != null ? lastCreated : 0L);
                emit(shape.row(b));
            }
            rejected.inc(n);
            bodies.inc(n); // last: whoever reads numRecordsIn finds its bodies counted as rows or errors already
            pending.clear();
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
                errors += reason == null ? 0 : 1;
                emit(shape.row(b));
            }
        }
        pending.clear();
        parsed.inc(n - errors);
        rejected.inc(errors);
        bodies.inc(n); // last: whoever reads numRecordsIn finds its bodies counted as rows or errors already
        bytes.inc(size);
        batches.inc();
        if (autoFallback != null) {
            fallbacks.inc();
        }
    }

    /** A binary row (the shape's, written again for the next one): the chained operator after this one copies it. */
    private void emit(RowData row) {
        output.collect(record.replace(row));
    }

    private long line(RowData in) {
        String source = "";
        if (sourceIndex >= 0 && !in.isNullAt(sourceIndex)) {
            StringData data = in.getString(sourceIndex);
            if (!data.equals(lastSourceData)) { // bodies come file by file
                lastSourceData = data;
                lastSource = data.toString();
            }
            source = lastSource;
        }
        long next = lines.getOrDefault(source, 0L) + 1;
        lines.put(source, next);
        return next;
    }
}
