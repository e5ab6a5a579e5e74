package io.dspark.vllm.request;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Not a test (no asserts, wall-clock figures): several senders (a job's subtasks, each its own {@link Requester})
 * over three replicas that take 16 completions at once each (100 ms each, 429 with Retry-After: 1 beyond: 480/s
 * together), with 'auto' concurrency; each sender keeps 256 requests outstanding, as ML_PREDICT's async operator
 * does. The second replica is closed (connections refused) after {@code kill} answers. Printed: the answers/s
 * from the first answer to the kill as a share of 480/s, each replica's share of them, the share of attempts
 * answered 429, the failed requests and the whole run's answers/s.
 *
 * <pre>java/build_jar.py run io.dspark.vllm.request.ReplicasBench [senders=2] [rows=4000] [kill=1500] [rounds=1]</pre>
 *
 * {@code kill} at or above {@code rows}: no replica is closed. {@code STAGGER_MS=N} in the environment: sender i
 * starts i x N ms late (subtasks scheduled one after the other).
 */
public final class ReplicasBench {
    private ReplicasBench() {}

    public static void main(String[] args) throws Exception {
        int senders = 2;
        int rows = 4000;
        int kill = 1500;
        int rounds = 1;
        for (String a : args) {
            String[] kv = a.split("=", 2);
            int v = Integer.parseInt(kv[1]);
            if (kv[0].equals("senders")) {
                senders = v;
            } else if (kv[0].equals("rows")) {
                rows = v;
            } else if (kv[0].equals("kill")) {
                kill = v;
            } else if (kv[0].equals("rounds")) {
                rounds = v;
            } else {
                throw new IllegalArgumentException(a);
            }
        }
        if (System.getenv("TRACE") != null) {
            long t0 = System.nanoTime();
            Slots.trace = m -> System.out.println(String.format(Locale.ROOT, "  %6.3f s  %s",
                    (System.nanoTime() - t0) / 1e9, m));
        }
        for (int i = 0; i < rounds; i++) {
            run(senders, rows, kill);
        }
    }

    static Servers.Web server(AtomicLong answered, AtomicLong refused, AtomicLong firstNs) throws Exception {
        AtomicInteger busy = new AtomicInteger();
        return new Servers.Web((x, s) -> {
            if (busy.incrementAndGet() > 16) {
                busy.decrementAndGet();
                refused.incrementAndGet();
                Servers.respond(x, 429, "{\"error\":{\"message\":\"too many\"}}", "Retry-After", "1");
                return;
            }
            try {
                Thread.sleep(100);
                Servers.respond(x, 200, Servers.OK_BODY);
            } finally {
                busy.decrementAndGet();
            }
            firstNs.compareAndSet(0, System.nanoTime());
            answered.incrementAndGet();
        });
    }

    static void run(int senders, int rows, int kill) throws Exception {
        AtomicLong[] answered = {new AtomicLong(), new AtomicLong(), new AtomicLong()};
        AtomicLong[] refused = {new AtomicLong(), new AtomicLong(), new AtomicLong()};
        AtomicLong firstNs = new AtomicLong();
        Servers.Web[] webs = new Servers.Web[3];
        for (int i = 0; i < 3; i++) {
            webs[i] = server(answered[i], refused[i], firstNs);
        }
        ObjectNode sp = Servers.spec(webs[0].base);
        org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode urls = sp.putArray("urls");
        org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode health =
                sp.putArray("health_urls");
        for (Servers.Web w : webs) {
            urls.add(w.base + "/v1/completions");
            health.add(w.base + "/health");
        }
        sp.put("deadline_s", 120.0);
        ((ObjectNode) sp.get("concurrency")).put("adaptive", true).put("initial", 16).put("min", 1).put("max", 256);
        List<Requester> requesters = new ArrayList<>();
        AtomicLong failed = new AtomicLong();
        double[] before = {0, 0, 0};
        double rate = 0;
        long start = System.nanoTime();
        try {
            List<Thread> drivers = new ArrayList<>();
            for (int s = 0; s < senders; s++) {
                Requester r = new Requester(Servers.of(sp), System.getenv("NOSPLIT") != null ? 1 : senders);
                requesters.add(r);
                int from = s;
                int count = senders;
                long delayMs = s * Long.parseLong(System.getenv().getOrDefault("STAGGER_MS", "0"));
                Thread t = new Thread(() -> {
                    try {
                        Thread.sleep(delayMs);
                    } catch (InterruptedException e) {
                        return;
                    }
                    Semaphore outstanding = new Semaphore(256);
                    List<CompletableFuture<Outcome>> sent = new ArrayList<>();
                    for (int i = from; i < rows; i += count) {
                        outstanding.acquireUninterruptibly();
                        sent.add(r.send("p" + i, "id" + i).whenComplete((o, e) -> {
                            if (!o.ok()) {
                                failed.incrementAndGet();
                            }
                            outstanding.release();
                        }));
                    }
                    for (CompletableFuture<Outcome> f : sent) {
                        f.join();
                    }
                });
                t.start();
                drivers.add(t);
            }
            while (kill < rows) {
                long total = answered[0].get() + answered[1].get() + answered[2].get();
                if (total >= kill) {
                    rate = total / ((System.nanoTime() - firstNs.get()) / 1e9);
                    before = new double[] {answered[0].get() / (double) total, answered[1].get() / (double) total,
                            answered[2].get() / (double) total};
                    webs[1].close();
                    break;
                }
                Thread.sleep(5);
            }
            for (Thread t : drivers) {
                t.join();
            }
        } finally {
            for (Requester r : requesters) {
                r.close();
            }
            for (Servers.Web w : webs) {
                w.close();
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        long ok = answered[0].get() + answered[1].get() + answered[2].get();
        long no = refused[0].get() + refused[1].get() + refused[2].get();
        System.out.println(String.format(Locale.ROOT,
                "senders %d: before the kill %.2f of 480/s (shares %.2f %.2f %.2f); 429: %.3f of %d; failed %d;"
                        + " all %.0f/s", senders, rate / 480, before[0], before[1], before[2],
                no / (double) Math.max(1, ok + no), ok + no, failed.get(), rows / seconds));
    }
}
