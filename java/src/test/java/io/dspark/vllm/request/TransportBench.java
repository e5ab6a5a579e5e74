package io.dspark.vllm.request;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import java.lang.management.ManagementFactory;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.IntFunction;

/**
 * Not a test (wall-clock and CPU figures): the request step's HTTP against the JDK's HttpClient, which it used
 * before (docs/flink.md, "The request step"), in one JVM, taking turns, against a server at zero latency:
 *
 * <pre>dspark-vllm simulate --port 8711 --profile coder --latency-ms 0 --workers 2 &amp;
 * python java/build_jar.py run io.dspark.vllm.request.TransportBench http://127.0.0.1:8711 MODEL 20000 4</pre>
 *
 * Each round sends N chat completions with 64 in flight through each path and prints requests per second and
 * this JVM's CPU time per request (the JIT warms up over the first rounds).
 */
public final class TransportBench {
    private TransportBench() {}

    static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    static void drive(String name, IntFunction<CompletableFuture<Boolean>> send, int n, int inFlight)
            throws InterruptedException {
        Semaphore slots = new Semaphore(inFlight);
        CountDownLatch done = new CountDownLatch(n);
        AtomicLong bad = new AtomicLong();
        long t0 = System.nanoTime();
        long c0 = cpuNanos();
        for (int i = 0; i < n; i++) {
            slots.acquire();
            send.apply(i).whenComplete((ok, e) -> {
                if (e != null || !ok) {
                    bad.incrementAndGet();
                }
                slots.release();
                done.countDown();
            });
        }
        done.await();
        double seconds = (System.nanoTime() - t0) / 1e9;
        double cpu = (cpuNanos() - c0) / 1e9;
        System.out.println(String.format(Locale.ROOT, "%-28s %7d requests %9.0f req/s  CPU %6.1f us/request  failed %d",
                name, n, n / seconds, cpu / n * 1e6, bad.get()));
    }

    public static void main(String[] args) throws Exception {
        String base = args[0];
        String model = args[1];
        int n = Integer.parseInt(args[2]);
        int rounds = Integer.parseInt(args[3]);
        String prefix = "{\"model\":\"" + model + "\",\"messages\":[{\"role\":\"user\",\"content\":";
        String suffix = "}]}";
        ObjectNode spec = Servers.spec(base);
        spec.put("url", base + "/v1/chat/completions").put("body_prefix", prefix).put("body_suffix", suffix);
        ((ObjectNode) spec.get("concurrency")).put("initial", 64).put("max", 64);
        HttpClient jdk = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
        URI uri = URI.create(base + "/v1/chat/completions");
        try (Requester requester = new Requester(Servers.of(spec))) {
            for (int round = 0; round < rounds; round++) {
                drive("request step (Netty)", i -> requester.send("Request " + i + ": answer briefly.", "r" + i)
                        .thenApply(Outcome::ok), n, 64);
                drive("JDK HttpClient", i -> jdk.sendAsync(HttpRequest.newBuilder(uri)
                                .header("content-type", "application/json").header("x-request-id", "j" + i)
                                .POST(HttpRequest.BodyPublishers.ofString(
                                        prefix + "\"Request " + i + ": answer briefly.\"" + suffix))
                                .build(), HttpResponse.BodyHandlers.ofByteArray())
                        .thenApply(r -> r.statusCode() == 200), n, 64);
            }
        }
    }
}
