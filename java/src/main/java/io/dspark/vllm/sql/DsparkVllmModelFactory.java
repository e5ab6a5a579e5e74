package io.dspark.vllm.sql;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.table.api.config.ExecutionConfigOptions;
import org.apache.flink.table.catalog.ResolvedCatalogModel;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.factories.FactoryUtil;
import org.apache.flink.table.factories.ModelProviderFactory;
import org.apache.flink.table.ml.ModelProvider;

import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.Set;

/**
 * The model provider of {@code CREATE MODEL ... WITH ('provider' = 'dspark-vllm')}, for {@code ML_PREDICT}: every
 * input row gets its answer's typed columns (and metadata) beside its own columns.
 *
 * <p>A face as thin as the table's ({@link DsparkVllmTableFactory}): the options, the INPUT and OUTPUT columns go
 * to the same Python planner ({@code connector.plan.model.model_plan}, through {@link PythonPlanner}), which
 * checks them (the table's option keys and defaults, its metadata registry, the profile's columns) and answers
 * with the plan; the runtime is the table's request step and parse step (the engine's ML_PREDICT function,
 * {@link io.dspark.vllm.engine.Engine#predict}).
 */
public final class DsparkVllmModelFactory implements ModelProviderFactory {

    @Override
    public String factoryIdentifier() {
        return DsparkVllmTableFactory.IDENTIFIER;
    }

    @Override
    public Set<ConfigOption<?>> requiredOptions() {
        return Collections.emptySet();
    }

    // The keys of connector.options.MODEL_OPTIONS (generated into TableOptions); the planner checks the values.
    @Override
    public Set<ConfigOption<?>> optionalOptions() {
        Set<ConfigOption<?>> options = new LinkedHashSet<>();
        for (String key : TableOptions.MODEL_KEYS) {
            if (!key.equals("provider")) {
                options.add(ConfigOptions.key(key).stringType().noDefaultValue());
            }
        }
        return options;
    }

    @Override
    public ModelProvider createModelProvider(Context context) {
        try {
            // The 'answer.<field>.<setting>' keys name the model's OUTPUT columns: the planner checks them.
            FactoryUtil.createModelProviderFactoryHelper(this, context).validateExcept("answer.");
        } catch (ValidationException e) {
            // As the table's factory says it: of this model, the nearest keys beside a misspelt one, on one line
            // (the whole list of ~45 keys hid the one meant).
            String named = "Model '" + context.getObjectIdentifier().asSummaryString() + "' ('provider' = '"
                    + DsparkVllmTableFactory.IDENTIFIER + "'): ";
            throw new ValidationException(PythonPlanner.oneLine(named + SqlRunner.nearestOptions(e.getMessage())));
        }
        ResolvedCatalogModel model = context.getCatalogModel();
        JsonNode plan =
                PythonPlanner.planModel(context.getObjectIdentifier(), model, context.getConfiguration().toMap());
        String output =
                model.getResolvedOutputSchema().toPhysicalRowDataType().getLogicalType().asSerializableString();
        String input = model.getResolvedInputSchema().toPhysicalRowDataType().getLogicalType().asSerializableString();
        long timeoutMs = context.getConfiguration().get(ExecutionConfigOptions.TABLE_EXEC_ASYNC_ML_PREDICT_TIMEOUT)
                .toMillis();
        int capacity = context.getConfiguration()
                .get(ExecutionConfigOptions.TABLE_EXEC_ASYNC_ML_PREDICT_MAX_CONCURRENT_OPERATIONS);
        return new DsparkVllmModelProvider(plan.toString(), input, output, timeoutMs, capacity);
    }
}
