package io.dspark.vllm.sql;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.factories.DynamicTableSourceFactory;
import org.apache.flink.table.factories.FactoryUtil;

import java.util.Collections;
import java.util.Set;

/**
 * The table factory of {@code 'connector' = 'dspark-vllm'}: Flink finds it on the classpath (the jar shipped in
 * the dspark-vllm wheel) wherever Flink SQL runs: a PyFlink program, the SQL Client, the SQL Gateway, a SQL
 * runner.
 *
 * <p>It is thin on purpose. Its option keys are generated from the package's option table (TableOptions) and
 * checked the Flink way; the values, the columns and the pipeline are planned by the package's Python code
 * ({@code python -m connector.plan}, see {@link PythonPlanner}), the one place that knows the options
 * table, the model profiles and the type mapping. At run time no Python runs on the TaskManagers but for the gpu
 * backend: HTTP in the engine's request step, parsing in its parse step (the native core), or, for 'parse.backend'
 * = 'gpu', in a Python function with libcudf ({@link Pipeline} builds them with {@link
 * io.dspark.vllm.engine.Engine}).
 */
public final class DsparkVllmTableFactory implements DynamicTableSourceFactory {

    public static final String IDENTIFIER = "dspark-vllm";

    @Override
    public String factoryIdentifier() {
        return IDENTIFIER;
    }

    // Declared in connector/options/declared.py and generated into TableOptions; Flink checks the keys here (FactoryUtil),
    // the planner then checks the values and the rules across options.
    @Override
    public Set<ConfigOption<?>> requiredOptions() {
        return Collections.emptySet();
    }

    @Override
    public Set<ConfigOption<?>> optionalOptions() {
        return TableOptions.OPTIONAL;
    }

    @Override
    public DynamicTableSource createDynamicTableSource(Context context) {
        String table = "Table '" + context.getObjectIdentifier().asSummaryString() + "' ('connector' = '"
                + IDENTIFIER + "'): ";
        // A retired key says what replaced it, before Flink's check would call it unsupported.
        for (String key : new java.util.TreeSet<>(context.getCatalogTable().getOptions().keySet())) {
            String replaced = TableOptions.retired(key);
            if (replaced != null) {
                throw new ValidationException(table + replaced);
            }
        }
        try {
            // The 'answer.<field>.<setting>' keys name the table's own columns: the planner checks them.
            FactoryUtil.createTableFactoryHelper(this, context).validateExcept("answer.");
        } catch (ValidationException e) {
            // Flink's own wording, said of this table like the planner's messages, the nearest keys beside a
            // misspelt one (SqlRunner.nearestOptions), and on one line as they are (the SQL Client showed its list
            // of options a line each: 65 lines for a misspelt option).
            throw new ValidationException(PythonPlanner.oneLine(table + SqlRunner.nearestOptions(e.getMessage())));
        }
        TablePlan plan =
                PythonPlanner.plan(
                        context.getObjectIdentifier(),
                        context.getCatalogTable(),
                        context.getConfiguration().toMap());
        return new DsparkVllmTableSource(plan, context.getPhysicalRowDataType(), context.getConfiguration().toMap());
    }
}
