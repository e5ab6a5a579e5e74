package io.dspark.vllm.flink;

import org.apache.flink.table.api.config.MLPredictRuntimeConfigOptions;
import org.apache.flink.table.functions.AsyncPredictFunction;
import org.apache.flink.table.ml.AsyncPredictRuntimeProvider;
import org.apache.flink.table.ml.ModelProvider;

import java.time.Duration;

/** What {@code ML_PREDICT} runs for a 'dspark-vllm' model: the asynchronous {@link ModelPredictFunction}. */
final class DsparkVllmModelProvider implements AsyncPredictRuntimeProvider {

    private final String plan;
    private final String inputType;
    private final String outputType;
    private final long defaultTimeoutMs; // 'table.exec.async-ml-predict.timeout'

    DsparkVllmModelProvider(String plan, String inputType, String outputType, long defaultTimeoutMs) {
        this.plan = plan;
        this.inputType = inputType;
        this.outputType = outputType;
        this.defaultTimeoutMs = defaultTimeoutMs;
    }

    @Override
    public AsyncPredictFunction createAsyncPredictFunction(ModelProvider.Context context) {
        // ML_PREDICT's 'timeout' (its config map), else the job's: the async operator fails the job when an
        // element passes it, so every request of the function ends before it.
        long timeoutMs = context.runtimeConfig().getOptional(MLPredictRuntimeConfigOptions.ASYNC_TIMEOUT)
                .map(Duration::toMillis).orElse(defaultTimeoutMs);
        return new ModelPredictFunction(plan, inputType, outputType, timeoutMs);
    }

    @Override
    public ModelProvider copy() {
        return new DsparkVllmModelProvider(plan, inputType, outputType, defaultTimeoutMs);
    }
}
