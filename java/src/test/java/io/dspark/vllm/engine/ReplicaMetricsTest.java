package io.dspark.vllm.engine;

import io.dspark.vllm.plan.PlanContract;
import io.dspark.vllm.request.RequestSpec;
import io.dspark.vllm.request.Requester;

import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.Map;
import java.util.TreeMap;

import org.junit.jupiter.api.Test;

/** Each replica's gauges, in group {@code replica} = its name, under the request step's group. */
public final class ReplicaMetricsTest {

    /** Records the gauges registered under it, by their path (group keys and values, then the name). */
    static final class Recording extends UnregisteredMetricsGroup {
        final String path;
        final Map<String, Gauge<?>> gauges;

        Recording(String path, Map<String, Gauge<?>> gauges) {
            this.path = path;
            this.gauges = gauges;
        }

        @Override
        public MetricGroup addGroup(String key, String value) {
            return new Recording(path + key + "=" + value + "/", gauges);
        }

        @Override
        public <T, G extends Gauge<T>> G gauge(String name, G gauge) {
            gauges.put(path + name, gauge);
            return gauge;
        }
    }

    @Test
    void eachReplicaHasItsGauges() throws Exception {
        ObjectMapper json = new ObjectMapper();
        ObjectNode n = json.createObjectNode();
        n.put("version", RequestSpec.VERSION);
        n.put("url", "http://127.0.0.1:9/v1/completions");
        n.put("health_url", "http://127.0.0.1:9/health");
        n.putArray("urls").add("http://127.0.0.1:9/v1/completions").add("http://127.0.0.1:10/v1/completions");
        n.putArray("health_urls").add("http://127.0.0.1:9/health").add("http://127.0.0.1:10/health");
        n.putObject("routing").put("mode", "least-loaded").put("prefix_bytes", 256).put("load_bound", 1.25)
                .put("resolve_interval_s", 30.0);
        n.putObject("headers");
        n.put("body_prefix", "{\"prompt\":");
        n.put("body_suffix", "}");
        n.put("timeout_s", 1.0);
        n.put("connect_timeout_s", 1.0);
        n.put("deadline_s", 1.0);
        n.put("max_attempts", 1);
        n.put("backoff_initial_s", 0.1);
        n.put("backoff_max_s", 1.0);
        n.put("max_retry_after_s", 1.0);
        n.put("hold_while_down", false);
        n.putNull("rate_limit");
        n.put("max_body_bytes", 1 << 20);
        ObjectNode tls = n.putObject("tls");
        tls.put("verify", true);
        tls.putNull("ca_bundle");
        tls.putNull("client_cert");
        tls.putNull("client_key");
        n.putObject("concurrency").put("adaptive", false).put("initial", 8).put("min", 1).put("max", 8);
        Map<String, Gauge<?>> gauges = new TreeMap<>();
        try (Requester r = new Requester(RequestSpec.fromJson(n))) {
            ReplicaMetrics.register(new Recording("", gauges), r);
            for (String replica : new String[] {"127.0.0.1:9", "127.0.0.1:10"}) {
                String at = PlanContract.REPLICA_GROUP + "=" + replica + "/";
                for (String name : new String[] {PlanContract.IN_FLIGHT, PlanContract.CONCURRENCY_LIMIT,
                        PlanContract.EJECTED, PlanContract.NUM_ANSWERS, PlanContract.NUM_THROTTLED,
                        PlanContract.LATENCY_MS_P50}) {
                    if (!gauges.containsKey(at + name)) {
                        throw new AssertionError("no gauge " + at + name + " in " + gauges.keySet());
                    }
                }
                Object limit = gauges.get(at + PlanContract.CONCURRENCY_LIMIT).getValue();
                if (!Long.valueOf(8).equals(limit)) {
                    throw new AssertionError("the limit of " + replica + ": " + limit);
                }
                Object ejected = gauges.get(at + PlanContract.EJECTED).getValue();
                if (!Long.valueOf(0).equals(ejected)) {
                    throw new AssertionError("ejected " + replica + ": " + ejected);
                }
            }
            if (gauges.size() != 12) {
                throw new AssertionError("two replicas, six gauges each: " + gauges.keySet());
            }
        }
    }
}
