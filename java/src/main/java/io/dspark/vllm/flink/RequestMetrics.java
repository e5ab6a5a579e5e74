package io.dspark.vllm.flink;

import io.dspark.vllm.request.Outcome;
import io.dspark.vllm.request.Requester;
import io.dspark.vllm.store.StoredRequests;

import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MeterView;
import org.apache.flink.metrics.MetricGroup;

/**
 * The request step's metrics, group {@code dspark}, for the table's {@link RequestStep} and the model's
 * {@link ModelPredictFunction}: numRequests, numResponses, numRequestsFailed, numRetries, numBytesIn,
 * numResponsesPerSecond, inFlight, concurrencyLimit, numThrottled, latencyMsP50/P95/P99; with a response store
 * ('request.store'): numAnsweredFromStore, numAnsweredFromCache, numTokensSaved, numStored, numStoreFailures,
 * storePutMsP50/P99 (a put's time until its record is durable: what the store adds before a row leaves).
 */
final class RequestMetrics {
    private final Counter requests;
    private final Counter responses;
    private final Counter failed;
    private final Counter retries;
    private final Counter bytes;
    private final io.dspark.vllm.request.Recent latencies = new io.dspark.vllm.request.Recent(1000);

    RequestMetrics(MetricGroup operatorGroup, StoredRequests answers) {
        Requester requester = answers.requester();
        MetricGroup group = operatorGroup.addGroup("dspark");
        group.gauge("numAnsweredFromStore", answers::answeredFromStore);
        group.gauge("numAnsweredFromCache", answers::answeredFromCache);
        group.gauge("numTokensSaved", answers::tokensSaved);
        group.gauge("numStored", answers::stored);
        group.gauge("numStoreFailures", answers::storeFailures);
        group.gauge("storePutMsP50", () -> answers.putMs(50));
        group.gauge("storePutMsP99", () -> answers.putMs(99));
        requests = group.counter("numRequests");
        responses = group.counter("numResponses");
        failed = group.counter("numRequestsFailed");
        retries = group.counter("numRetries");
        bytes = group.counter("numBytesIn");
        group.meter("numResponsesPerSecond", new MeterView(responses, 60));
        group.gauge("inFlight", requester::inFlight);
        group.gauge("concurrencyLimit", requester::concurrencyLimit);
        group.gauge("numThrottled", requester::throttled);
        group.gauge("latencyMsP50", () -> latencies.percentile(50));
        group.gauge("latencyMsP95", () -> latencies.percentile(95));
        group.gauge("latencyMsP99", () -> latencies.percentile(99));
    }

    void sent() {
        requests.inc();
    }

    /** A request ended (after all its attempts). */
    void ended(Outcome outcome) {
        if (outcome.ok()) {
            responses.inc();
        } else {
            failed.inc();
        }
        retries.inc(Math.max(0, outcome.attempts - 1));
        bytes.inc(outcome.body == null ? 0 : outcome.body.length);
        latencies.add(outcome.latencyMs);
    }
}
