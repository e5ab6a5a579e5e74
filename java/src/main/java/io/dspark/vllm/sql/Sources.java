package io.dspark.vllm.sql;

import io.dspark.vllm.plan.Plan;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;

import java.time.Duration;

/**
 * The internal source of a scan, a DataStream of the pipeline's first columns built from the plan's
 * {@code source} (connector.plan.table, {@code _source}); no SQL:
 *
 * <ul>
 *   <li>{@code replay}: the lines of the files at {@code path} ({@link FileLines#bodies}), read once, or watched
 *       for new files every {@code monitor_interval_ms};
 *   <li>{@code prompts}: the lines of the files at {@code path} ({@link FileLines#prompts}), read once;
 *   <li>{@code rate}: the numbers 0, 1, 2, ... at a rate ({@link PacedRate}), {@code count} of them or no end
 *       (-1), each the prompt {@code template} with {@code {n}} replaced by it, the request id
 *       {@code <table>-<n>}.
 * </ul>
 */
final class Sources {

    private Sources() {}

    static SingleOutputStreamOperator<RowData> build(StreamExecutionEnvironment env, Plan.Source source) {
        String kind = source.kind;
        switch (kind) {
            case "replay": {
                FileSource.FileSourceBuilder<RowData> files =
                        FileSource.forBulkFileFormat(FileLines.bodies(), new Path(need(source.path, kind, "path")));
                if (source.monitorIntervalMs != null) {
                    files.monitorContinuously(Duration.ofMillis(source.monitorIntervalMs));
                }
                return env.fromSource(files.build(), WatermarkStrategy.noWatermarks(), "dspark-vllm bodies");
            }
            case "prompts":
                return env.fromSource(
                        FileSource.forBulkFileFormat(FileLines.prompts(), new Path(need(source.path, kind, "path")))
                                .build(),
                        WatermarkStrategy.noWatermarks(),
                        "dspark-vllm prompts");
            case "rate":
                return rate(env, source);
            default:
                throw new IllegalArgumentException("dspark-vllm: the plan's source is of an unknown kind: " + kind);
        }
    }

    /**
     * 'prompts.rate': Flink's DataGeneratorSource, whose checkpoint holds the ranges still to emit. SQL's datagen
     * 'sequence' kind keeps every number still to come in memory and in each checkpoint, and refuses to start
     * without an end (more than Integer.MAX_VALUE).
     */
    private static SingleOutputStreamOperator<RowData> rate(StreamExecutionEnvironment env, Plan.Source source) {
        long count = need(source.count, "rate", "count");
        DataGeneratorSource<RowData> numbers =
                new DataGeneratorSource<>(
                        new Numbered(need(source.template, "rate", "template"), need(source.table, "rate", "table")),
                        count < 0 ? Long.MAX_VALUE : count,
                        new PacedRate<>(need(source.rate, "rate", "rate")),
                        InternalTypeInfo.of(FileLines.PROMPTS));
        return env.fromSource(numbers, WatermarkStrategy.noWatermarks(), "dspark-vllm prompts at a rate");
    }

    /** A key a source of this kind needs, which the record leaves optional. */
    private static <T> T need(T value, String kind, String key) {
        if (value == null) {
            throw new IllegalArgumentException("dspark-vllm: the table's plan.source of kind '" + kind + "' has no '"
                    + key + "': install the same dspark-vllm on the client and the TaskManagers");
        }
        return value;
    }

    /** Number n as a prompt row: the template with every {@code {n}} replaced, the id {@code <table>-<n>}. */
    static final class Numbered implements GeneratorFunction<Long, RowData> {
        private static final long serialVersionUID = 1L;
        private final String template;
        private final String table;

        Numbered(String template, String table) {
            this.template = template;
            this.table = table;
        }

        @Override
        public RowData map(Long n) {
            String number = Long.toString(n);
            return GenericRowData.of(
                    StringData.fromString(template.replace("{n}", number)),
                    StringData.fromString(table + "-" + number));
        }
    }
}
