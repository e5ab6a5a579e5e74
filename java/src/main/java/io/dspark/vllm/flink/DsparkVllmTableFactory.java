package io.dspark.vllm.flink;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.factories.DynamicTableSourceFactory;

import java.util.Collections;
import java.util.Set;

/**
 * The table factory of {@code 'connector' = 'dspark-vllm'}: Flink finds it on the classpath (the jar shipped in
 * the dspark-vllm wheel) wherever Flink SQL runs: a PyFlink program, the SQL Client, the SQL Gateway, a SQL
 * runner.
 *
 * <p>It is thin on purpose. The options, the columns and the pipeline are planned by the package's Python code
 * ({@code python -m connector.flink.planner}, see {@link PythonPlanner}), the one place that knows the options
 * table, the model profiles and the type mapping; parsing and HTTP run in Python functions on the workers
 * ({@link Pipeline}).
 */
public final class DsparkVllmTableFactory implements DynamicTableSourceFactory {

    public static final String IDENTIFIER = "dspark-vllm";

    @Override
    public String factoryIdentifier() {
        return IDENTIFIER;
    }

    // Declared and validated by connector/options.py (with Flink's wording), through the planner.
    @Override
    public Set<ConfigOption<?>> requiredOptions() {
        return Collections.emptySet();
    }

    @Override
    public Set<ConfigOption<?>> optionalOptions() {
        return Collections.emptySet();
    }

    @Override
    public DynamicTableSource createDynamicTableSource(Context context) {
        TablePlan plan =
                PythonPlanner.plan(
                        context.getObjectIdentifier(),
                        context.getCatalogTable(),
                        context.getConfiguration().toMap());
        return new DsparkVllmTableSource(plan, context.getPhysicalRowDataType(), context.getConfiguration().toMap());
    }
}
