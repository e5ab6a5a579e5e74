package io.dspark.vllm.engine;

import io.dspark.vllm.plan.PlanContract;
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
 * The model's parse step runs in the same operator and counts numBytesIn itself ({@link ParseBatch}): there the
 * request step does not register it (one name twice in a group is dropped, with a WARN).
 */
final class RequestMetrics {
    private final Counter requests;
    private final Counter responses;
    private final Counter failed;
    private final Counter retries;
    private final Counter bytes;
    private final io.dspark.vllm.request.Recent latencies = new io.dspark.vllm.request.Recent(1000);

    RequestMetrics(MetricGroup operatorGroup, StoredRequests answers) {
        this(operatorGroup, answers, true);
    }

    RequestMetrics(MetricGroup operatorGroup, StoredRequests answers, boolean countsBytes) {
        Requester requester = answers.requester();
        MetricGroup group = operatorGroup.addGroup(PlanContract.GROUP);
        group.gauge(PlanContract.NUM_ANSWERED_FROM_STORE, answers::answeredFromStore);
        group.gauge(PlanContract.NUM_ANSWERED_FROM_CACHE, answers::answeredFromCache);
        group.gauge(PlanContract.NUM_TOKENS_SAVED, answers::tokensSaved);
        group.gauge(PlanContract.NUM_STORED, answers::stored);
        group.gauge(PlanContract.NUM_STORE_FAILURES, answers::storeFailures);
        group.gauge(PlanContract.STORE_PUT_MS_P50, () -> answers.putMs(50));
        group.gauge(PlanContract.STORE_PUT_MS_P99, () -> answers.putMs(99));
        requests = group.counter(PlanContract.NUM_REQUESTS);
        responses = group.counter(PlanContract.NUM_RESPONSES);
        failed = group.counter(PlanContract.NUM_REQUESTS_FAILED);
        retries = group.counter(PlanContract.NUM_RETRIES);
        bytes = countsBytes ? group.counter(PlanContract.NUM_BYTES_IN) : null;
        group.meter(PlanContract.NUM_RESPONSES_PER_SECOND, new MeterView(responses, 60));
        group.gauge(PlanContract.IN_FLIGHT, requester::inFlight);
        group.gauge(PlanContract.CONCURRENCY_LIMIT, requester::concurrencyLimit);
        group.gauge(PlanContract.NUM_THROTTLED, requester::throttled);
        group.gauge(PlanContract.LATENCY_MS_P50, () -> latencies.percentile(50));
        group.gauge(PlanContract.LATENCY_MS_P95, () -> latencies.percentile(95));
        group.gauge(PlanContract.LATENCY_MS_P99, () -> latencies.percentile(99));
        ReplicaMetrics.register(group, requester);
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
        if (bytes != null) {
            bytes.inc(outcome.body == null ? 0 : outcome.body.length);
        }
        latencies.add(outcome.latencyMs);
    }
}
