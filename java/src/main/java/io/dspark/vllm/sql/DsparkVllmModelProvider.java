package io.dspark.vllm.sql;

import io.dspark.vllm.engine.Engine;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.table.api.config.MLPredictRuntimeConfigOptions;
import org.apache.flink.table.functions.AsyncPredictFunction;
import org.apache.flink.table.ml.AsyncPredictRuntimeProvider;
import org.apache.flink.table.ml.ModelProvider;

import java.time.Duration;

/** What {@code ML_PREDICT} runs for a 'dspark-vllm' model: the asynchronous {@link ModelPredictFunction}. */
final class DsparkVllmModelProvider implements AsyncPredictRuntimeProvider {
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(DsparkVllmModelProvider.class);

    private final String plan;
    private final String inputType;
    private final String outputType;
    private final long defaultTimeoutMs; // 'table.exec.async-ml-predict.timeout'
    private final int defaultCapacity; // 'table.exec.async-ml-predict.max-concurrent-operations'

    DsparkVllmModelProvider(
            String plan, String inputType, String outputType, long defaultTimeoutMs, int defaultCapacity) {
        this.plan = plan;
        this.inputType = inputType;
        this.outputType = outputType;
        this.defaultTimeoutMs = defaultTimeoutMs;
        this.defaultCapacity = defaultCapacity;
    }

    @Override
    public AsyncPredictFunction createAsyncPredictFunction(ModelProvider.Context context) {
        // ML_PREDICT's 'timeout' (its config map), else the job's: the async operator fails the job when an
        // element passes it, so every request of the function ends before it.
        long timeoutMs = context.runtimeConfig().getOptional(MLPredictRuntimeConfigOptions.ASYNC_TIMEOUT)
                .map(Duration::toMillis).orElse(defaultTimeoutMs);
        Engine.predictDeadlineS(timeoutMs); // a timeout too short for any request is refused here, planned
        // The async operator holds at most this many rows: the requests on the wire cannot be more.
        int capacity = context.runtimeConfig().getOptional(MLPredictRuntimeConfigOptions.ASYNC_MAX_CONCURRENT_OPERATIONS)
                .orElse(defaultCapacity);
        int wanted = concurrency();
        if (capacity < wanted) {
            LOG.warn("dspark-vllm: ML_PREDICT holds at most {} rows at once ('max-concurrent-operations'), fewer than "
                    + "the model's 'request.concurrency' ({}): set MAP['max-concurrent-operations', '{}'] in "
                    + "ML_PREDICT (or 'table.exec.async-ml-predict.max-concurrent-operations') for as many requests "
                    + "on the wire", capacity, wanted, wanted);
        }
        return Engine.predict(plan, inputType, outputType, timeoutMs);
    }

    /** The most requests the model's request step puts on the wire ('request.concurrency' or its max). */
    private int concurrency() {
        try {
            return (int) io.dspark.vllm.plan.PlanReader.readModel(new ObjectMapper().readTree(plan))
                    .request.client.concurrency.max;
        } catch (Exception e) {
            return 0;
        }
    }

    @Override
    public ModelProvider copy() {
        return new DsparkVllmModelProvider(plan, inputType, outputType, defaultTimeoutMs, defaultCapacity);
    }
}
