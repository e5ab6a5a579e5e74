package io.dspark.vllm.request;

import io.dspark.vllm.store.FileSystemStore;
import io.dspark.vllm.store.KafkaStore;
import io.dspark.vllm.store.ResponseStore;
import io.dspark.vllm.store.StoredRequests;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;

/**
 * Not a test (no asserts, wall-clock figures): what a response store costs a request. A server on 127.0.0.1 that
 * answers at once with a body of about 1 KB (so the store's time is not hidden behind a model's); a driver that
 * keeps {@code in-flight} requests outstanding, as Flink's async operator does, through {@link StoredRequests}
 * with no store, the filesystem store (a fresh folder; each put flushed and synced) and, given a bootstrap, the
 * Kafka store (a fresh topic; each put acknowledged by the broker, acks=all). The variants take turns, round after
 * round, each with distinct prompts (every request is sent and put). Prints for each: rows/s, the latency of a
 * request from sending to its answer being ready (p50/p99: with a store, the put included), the put's own time
 * (p50/p99), and the ratios against no store of the same round.
 *
 * <pre>python java/build_jar.py run io.dspark.vllm.request.StoreBench [requests] [in-flight] [rounds] [kafka-bootstrap]</pre>
 */
public final class StoreBench {
    private StoreBench() {}

    /** An answer of about 1 KB, like a short chat completion with usage. */
    static final String BODY;

    static {
        StringBuilder text = new StringBuilder();
        while (text.length() < 800) {
            text.append("The answer is forty-two, and here is why. ");
        }
        BODY = "{\"id\":\"cmpl-1\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"m\","
                + "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"" + text
                + "\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":180,"
                + "\"total_tokens\":200}}";
    }

    public static void main(String[] args) throws Exception {
        int requests = args.length > 0 ? Integer.parseInt(args[0]) : 5000;
        int inFlight = args.length > 1 ? Integer.parseInt(args[1]) : 64;
        int rounds = args.length > 2 ? Integer.parseInt(args[2]) : 3;
        String kafka = args.length > 3 ? args[3] : null;
        System.out.printf(Locale.ROOT, "response store cost: %,d requests a run, %d in flight, %d rounds, a %,d B body%n",
                requests, inFlight, rounds, BODY.length());
        List<String> variants = new ArrayList<>(List.of("none", "folder"));
        if (kafka != null) {
            variants.add("kafka");
        }
        Map<String, List<double[]>> results = new LinkedHashMap<>();
        variants.forEach(v -> results.put(v, new ArrayList<>()));
        Path work = Files.createTempDirectory("store-bench");
        try (Servers.Web web = new Servers.Web((x, s) -> Servers.respond(x, 200, BODY))) {
            run(web, null, 200, inFlight, "warm-up"); // JIT and connections, not counted
            for (int round = 1; round <= rounds; round++) {
                for (String variant : variants) {
                    ResponseStore store = null;
                    if (variant.equals("folder")) {
                        store = new FileSystemStore(work.resolve("r" + round).toUri().toString(), 0);
                    } else if (variant.equals("kafka")) {
                        store = new KafkaStore("kafka://" + kafka + "/store-bench-" + System.nanoTime());
                    }
                    double[] r = run(web, store, requests, inFlight, variant + "-" + round);
                    results.get(variant).add(r);
                    System.out.printf(Locale.ROOT,
                            "  round %d %-6s %,8.0f rows/s  latency p50 %6.2f ms p99 %6.2f ms  put p50 %6.2f ms "
                                    + "p99 %6.2f ms%n",
                            round, variant, r[0], r[1], r[2], r[3], r[4]);
                }
            }
        } finally {
            try (var files = Files.walk(work)) {
                files.sorted((a, b) -> b.compareTo(a)).forEach(p -> p.toFile().delete());
            }
        }
        double[] none = median(results.get("none"));
        for (String variant : variants) {
            double[] m = median(results.get(variant));
            System.out.printf(Locale.ROOT,
                    "%-6s (median of %d) %,8.0f rows/s (%.2fx no store)  latency p50 %6.2f ms (+%.2f ms) "
                            + "p99 %6.2f ms (+%.2f ms)  put p50 %.2f ms p99 %.2f ms%n",
                    variant, rounds, m[0], m[0] / none[0], m[1], m[1] - none[1], m[2], m[2] - none[2], m[3], m[4]);
        }
    }

    /** {rows/s, latency p50 ms, p99 ms, put p50 ms, put p99 ms} of {@code n} requests through the store. */
    static double[] run(Servers.Web web, ResponseStore store, int n, int inFlight, String tag) throws Exception {
        Semaphore slots = new Semaphore(inFlight);
        CountDownLatch done = new CountDownLatch(n);
        double[] latencies = new double[n];
        Requester requester = new Requester(Servers.of(spec(web.base, inFlight)));
        try (StoredRequests requests = new StoredRequests(requester, store, 0)) {
            long started = System.nanoTime();
            for (int i = 0; i < n; i++) {
                slots.acquire();
                int at = i;
                long sent = System.nanoTime();
                requests.send("question " + tag + " " + i, tag + "-" + i).whenComplete((answer, e) -> {
                    latencies[at] = (System.nanoTime() - sent) / 1e6;
                    if (e != null || !answer.outcome.ok()) {
                        System.out.println("  failed: " + (e != null ? e : answer.outcome.error));
                    }
                    slots.release();
                    done.countDown();
                });
            }
            done.await();
            double seconds = (System.nanoTime() - started) / 1e9;
            Arrays.sort(latencies);
            return new double[] {
                n / seconds, latencies[n / 2], latencies[(int) Math.ceil(n * 0.99) - 1],
                requests.putMs(50), requests.putMs(99)};
        }
    }

    private static org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode spec(
            String base, int inFlight) {
        var n = Servers.spec(base);
        var c = n.putObject("concurrency");
        c.put("adaptive", false);
        c.put("initial", inFlight);
        c.put("min", inFlight);
        c.put("max", inFlight);
        return n;
    }

    private static double[] median(List<double[]> runs) {
        double[] m = new double[runs.get(0).length];
        for (int k = 0; k < m.length; k++) {
            double[] column = new double[runs.size()];
            for (int r = 0; r < runs.size(); r++) {
                column[r] = runs.get(r)[k];
            }
            Arrays.sort(column);
            m[k] = column[column.length / 2];
        }
        return m;
    }
}
