package io.dspark.vllm.engine;

import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.BoundedOneInput;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.runtime.typeutils.RowDataSerializer;
import org.apache.flink.table.types.logical.RowType;

import java.util.ArrayList;
import java.util.List;

/**
 * The parse step inside the JVM: batches of bodies through the native core ({@link ParseBatch}). Each output
 * row is assembled by a {@link RowShape}: the table's declared row itself, or the flat row (the input columns
 * the metadata reads, the flat columns and the internal ones, as the Python parse function makes them:
 * connector/flink/frames.py, {@code to_table}) that SQL turns into it; as a binary row (cheap to copy between
 * chained operators).
 *
 * <p>A batch is parsed when it holds {@code batchSize} bodies, {@code batchMillis} after its first body came,
 * before a checkpoint barrier or a watermark goes on, and at the end of the input: a body never waits longer.
 */
public final class ParseOperator extends AbstractStreamOperator<RowData>
        implements OneInputStreamOperator<RowData, RowData>, BoundedOneInput, ProcessingTimeCallback {

    private final ParseBatch parse;
    private final RowType inputType;
    private final int batchSize;
    private final long batchMillis;

    private transient StreamRecord<RowData> record;
    private transient RowDataSerializer copyInput; // with object reuse
    private transient List<RowData> pending;
    private transient long timer;

    ParseOperator(ParseBatch parse, RowType inputType, int batchSize, long batchMillis) {
        this.parse = parse;
        this.inputType = inputType;
        this.batchSize = batchSize;
        this.batchMillis = batchMillis;
    }

    @Override
    public void open() throws Exception {
        super.open();
        parse.open(getRuntimeContext().getMetricGroup(), getRuntimeContext().getTaskInfo().getIndexOfThisSubtask() == 0,
                ParseBatch.gpuHere(getRuntimeContext().getExternalResourceInfos(ParseBatch.GPU_RESOURCE)));
        record = new StreamRecord<>(null);
        copyInput = getExecutionConfig().isObjectReuseEnabled() ? new RowDataSerializer(inputType) : null;
        pending = new ArrayList<>();
        timer = -1;
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
        if (pending.isEmpty()) {
            return;
        }
        // A binary row (the shape's, written again for the next one): the chained operator after this one copies it.
        parse.parse(pending, row -> output.collect(record.replace(row)));
        pending.clear();
    }
}
