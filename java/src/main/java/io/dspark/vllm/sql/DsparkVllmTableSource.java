package io.dspark.vllm.sql;

import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.connector.ChangelogMode;
import org.apache.flink.table.connector.ProviderContext;
import org.apache.flink.table.connector.source.DataStreamScanProvider;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.connector.source.ScanTableSource;
import org.apache.flink.table.connector.source.abilities.SupportsProjectionPushDown;
import org.apache.flink.table.connector.source.abilities.SupportsReadingMetadata;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.types.DataType;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The scan of a 'dspark-vllm' table. Only the columns a query reads are parsed (projection push-down) and only
 * the metadata it reads is carried; the rows come from {@link Pipeline}.
 */
final class DsparkVllmTableSource implements ScanTableSource, SupportsProjectionPushDown, SupportsReadingMetadata {

    private final TablePlan plan;
    private final DataType physical;
    private final Map<String, String> config;
    private List<String> physicalNames;
    private List<String> metadataKeys = new ArrayList<>();
    private DataType produced;

    DsparkVllmTableSource(TablePlan plan, DataType physical, Map<String, String> config) {
        this.plan = plan;
        this.physical = physical;
        this.config = config;
        this.physicalNames = DataType.getFieldNames(physical);
        this.produced = physical;
    }

    private DsparkVllmTableSource(DsparkVllmTableSource other) {
        this(other.plan, other.physical, other.config);
        this.physicalNames = new ArrayList<>(other.physicalNames);
        this.metadataKeys = new ArrayList<>(other.metadataKeys);
        this.produced = other.produced;
    }

    @Override
    public ChangelogMode getChangelogMode() {
        return ChangelogMode.insertOnly();
    }

    @Override
    public ScanRuntimeProvider getScanRuntimeProvider(ScanContext context) {
        return new DataStreamScanProvider() {
            @Override
            public DataStream<RowData> produceDataStream(
                    ProviderContext providerContext, StreamExecutionEnvironment env) {
                return Pipeline.build(env, config, plan, physicalNames, metadataKeys, produced, providerContext);
            }

            @Override
            public boolean isBounded() {
                return plan.bounded();
            }
        };
    }

    @Override
    public boolean supportsNestedProjection() {
        return false;
    }

    @Override
    public void applyProjection(int[][] projectedFields, DataType producedDataType) {
        List<String> all = DataType.getFieldNames(physical);
        List<String> names = new ArrayList<>();
        for (int[] path : projectedFields) {
            names.add(all.get(path[0]));
        }
        this.physicalNames = names;
        this.produced = producedDataType;
    }

    @Override
    public Map<String, DataType> listReadableMetadata() {
        return plan.metadataTypes();
    }

    @Override
    public void applyReadableMetadata(List<String> metadataKeys, DataType producedDataType) {
        this.metadataKeys = new ArrayList<>(metadataKeys);
        this.produced = producedDataType;
    }

    @Override
    public DynamicTableSource copy() {
        return new DsparkVllmTableSource(this);
    }

    @Override
    public String asSummaryString() {
        return "dspark-vllm(" + plan.mode() + ")";
    }
}
