package io.dspark.vllm.sql;

import io.dspark.vllm.engine.Engine;
import io.dspark.vllm.plan.Plan;
import io.dspark.vllm.plan.PlanReader;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.table.catalog.ObjectIdentifier;
import org.apache.flink.table.catalog.ResolvedCatalogTable;
import org.apache.flink.table.connector.ChangelogMode;
import org.apache.flink.table.connector.Projection;
import org.apache.flink.table.connector.format.DecodingFormat;
import org.apache.flink.table.connector.format.ProjectableDecodingFormat;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.factories.DeserializationFormatFactory;
import org.apache.flink.table.factories.DynamicTableFactory;
import org.apache.flink.table.factories.FactoryUtil;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/**
 * {@code 'format' = 'dspark-vllm'}: raw vLLM bodies in any Flink source (filesystem, Kafka, ...) as the typed
 * columns of a profile, parsed in the JVM by the native core ({@link NativeDeserializationSchema}).
 *
 * <pre>
 *   CREATE TABLE t (id STRING, created TIMESTAMP(3), usage ROW&lt;total_tokens BIGINT&gt;, error_reason STRING)
 *   WITH ('connector' = 'kafka', ..., 'format' = 'dspark-vllm', 'dspark-vllm.profile' = 'coder')
 * </pre>
 *
 * The columns and options are checked by the package's Python planner on the client
 * ({@code connector.plan.format.format_plan}), which also writes the core's plan; the TaskManagers run no
 * Python. Projectable: only the columns a query reads are parsed.
 */
public final class DsparkVllmFormatFactory implements DeserializationFormatFactory {

    public static final String IDENTIFIER = "dspark-vllm";

    @Override
    public String factoryIdentifier() {
        return IDENTIFIER;
    }

    @Override
    public Set<ConfigOption<?>> requiredOptions() {
        return Set.of();
    }

    @Override
    public Set<ConfigOption<?>> optionalOptions() {
        return TableOptions.FORMAT;
    }

    @Override
    public DecodingFormat<DeserializationSchema<RowData>> createDecodingFormat(
            DynamicTableFactory.Context context, ReadableConfig formatOptions) {
        FactoryUtil.validateFactoryOptions(this, formatOptions);
        // Every key under 'dspark-vllm.', not only the known ones: the planner names a misspelt one (the
        // filesystem connector, for one, does not check its format's keys; 'on-eror' was ignored unseen).
        Map<String, String> given = new LinkedHashMap<>(new java.util.TreeMap<>(formatOptions.toMap()));
        Map<String, String> config = context.getConfiguration().toMap();
        JsonNode json = PythonPlanner.formatPlan(
                context.getObjectIdentifier(), context.getCatalogTable(), given, config,
                keyOnlyColumns(context.getCatalogTable()));
        return new Format(PlanReader.readFormat(json), json, context.getObjectIdentifier(), config);
    }

    /**
     * The physical columns the Kafka connectors read from a record's key and not from its value, so that the
     * value's format makes none of them: 'key.fields' (kafka) or the primary key (upsert-kafka) with
     * 'value.fields-include' = 'EXCEPT_KEY'. With 'ALL' (the default) the value holds them too.
     */
    static Set<String> keyOnlyColumns(ResolvedCatalogTable table) {
        Map<String, String> options = table.getOptions();
        if (!"EXCEPT_KEY".equalsIgnoreCase(options.getOrDefault("value.fields-include", "ALL").trim())) {
            return Set.of();
        }
        Set<String> names = new java.util.HashSet<>();
        String keyFields = options.get("key.fields");
        if (keyFields != null) {
            for (String name : keyFields.split(";")) {
                names.add(name.trim());
            }
        } else {
            table.getResolvedSchema().getPrimaryKey().ifPresent(key -> names.addAll(key.getColumns()));
        }
        return names;
    }

    private static final class Format implements ProjectableDecodingFormat<DeserializationSchema<RowData>> {
        private final Plan.Format plan;
        private final JsonNode json; // the plan as the planner wrote it: sent back with the projection
        private final ObjectIdentifier identifier;
        private final Map<String, String> config;

        Format(Plan.Format plan, JsonNode json, ObjectIdentifier identifier, Map<String, String> config) {
            this.plan = plan;
            this.json = json;
            this.identifier = identifier;
            this.config = config;
        }

        /** The decoder of the projected row; the planner says what the native core reads for its columns. */
        @Override
        public DeserializationSchema<RowData> createRuntimeDecoder(
                DynamicTableSource.Context context, DataType physicalDataType, int[][] projections) {
            DataType produced = Projection.of(projections).project(physicalDataType);
            Plan.NativeRead read =
                    PythonPlanner.formatRead(identifier, json, DataType.getFieldNames(produced), config);
            return Engine.format(
                    plan, read, (RowType) produced.getLogicalType(), context.createTypeInformation(produced));
        }

        @Override
        public ChangelogMode getChangelogMode() {
            return ChangelogMode.insertOnly();
        }
    }
}
