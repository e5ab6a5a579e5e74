package io.dspark.vllm.engine;

import io.dspark.vllm.plan.PlanContract;
import io.dspark.vllm.request.Replicas;
import io.dspark.vllm.request.Requester;

import org.apache.flink.metrics.MetricGroup;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.ToDoubleFunction;

/**
 * Each replica's gauges in the request step's group ({@code dspark}), in a group {@code replica} = its name:
 * inFlight, concurrencyLimit, ejected (1 while it gets no requests), numAnswers, numThrottled, latencyMsP50.
 * Registered once per name as replicas join (a host name is looked up again); a name that leaves and comes back
 * reads the replica that has it now.
 */
final class ReplicaMetrics {
    private final MetricGroup group;
    private final Map<String, Replicas.Replica> current = new ConcurrentHashMap<>();

    private ReplicaMetrics(MetricGroup group) {
        this.group = group;
    }

    static void register(MetricGroup requestGroup, Requester requester) {
        ReplicaMetrics m = new ReplicaMetrics(requestGroup);
        requester.onReplica(m::joined);
    }

    private void joined(Replicas.Replica r) {
        if (current.put(r.name(), r) != null) {
            return; // its gauges are there: they read the replica that has the name now
        }
        MetricGroup g = group.addGroup(PlanContract.REPLICA_GROUP, r.name());
        String name = r.name();
        gauge(g, PlanContract.IN_FLIGHT, name, Replicas.Replica::inFlight);
        gauge(g, PlanContract.CONCURRENCY_LIMIT, name, Replicas.Replica::limit);
        gauge(g, PlanContract.EJECTED, name, x -> x.ejected() ? 1 : 0);
        gauge(g, PlanContract.NUM_ANSWERS, name, x -> x.answers());
        gauge(g, PlanContract.NUM_THROTTLED, name, x -> x.throttled());
        gauge(g, PlanContract.LATENCY_MS_P50, name, x -> Math.round(x.latencyMs(50)));
    }

    private void gauge(MetricGroup g, String metric, String name, ToDoubleFunction<Replicas.Replica> read) {
        g.gauge(metric, () -> {
            Replicas.Replica r = current.get(name);
            return r == null ? 0L : (long) read.applyAsDouble(r);
        });
    }
}
