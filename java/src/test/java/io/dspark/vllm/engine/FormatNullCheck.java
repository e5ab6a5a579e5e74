package io.dspark.vllm.engine;

import io.dspark.vllm.plan.Plan;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.table.api.DataTypes;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.VarCharType;
import org.apache.flink.util.UserCodeClassLoader;

import java.nio.file.Paths;

/**
 * FormatNullCheck PLAN_FILE ON_ERROR: the format's deserializer ('dspark-vllm') given a null message (a Kafka
 * record without a value) and an empty one; prints each result row's error_reason ("null row" when skipped,
 * "THROWN ..." when it fails).
 */
public final class FormatNullCheck {
    private static Plan.Physical physical(Plan.Layout layout) {
        return new Plan.Physical(java.util.List.of(), layout);
    }

    public static void main(String[] args) throws Exception {
        RowType type = (RowType) DataTypes.ROW(
                DataTypes.FIELD("id", DataTypes.STRING()),
                DataTypes.FIELD("error_reason", DataTypes.STRING()),
                DataTypes.FIELD("error_field", DataTypes.STRING())).getLogicalType();
        NativeDeserializationSchema schema = new NativeDeserializationSchema(
                io.dspark.vllm.parse.PythonPlan.read(Paths.get(args[0])),
                java.util.Map.of("id", new VarCharType(VarCharType.MAX_LENGTH)),
                java.util.Map.of(
                        "id", physical(new Plan.Layout("id", null, null, null)),
                        "error_reason", physical(new Plan.Layout("_error", null, null, null)),
                        "error_field", physical(new Plan.Layout("_error_field", null, null, null))),
                type, args[1], null, null);
        schema.open(new DeserializationSchema.InitializationContext() {
            @Override
            public MetricGroup getMetricGroup() {
                return new UnregisteredMetricsGroup();
            }

            @Override
            public UserCodeClassLoader getUserCodeClassLoader() {
                return null;
            }
        });
        for (byte[] message : new byte[][] {null, new byte[0]}) {
            try {
                RowData row = schema.deserialize(message);
                System.out.println(row == null ? "null row" : String.valueOf(row.getString(1)));
            } catch (Exception e) {
                System.out.println("THROWN " + e.getMessage());
            }
        }
    }
}
