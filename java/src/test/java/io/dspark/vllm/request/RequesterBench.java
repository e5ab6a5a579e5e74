package io.dspark.vllm.request;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.Locale;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Not a test (no asserts, wall-clock figures): the adaptive limit against the goal it is measured by. A server
 * that takes 16 completions at once (100 ms each) and answers 429 with Retry-After: 1 beyond; a driver that
 * keeps the async operator's capacity (the limit's max) of requests outstanding, like Flink's AsyncWaitOperator.
 * Prints rows/s and the share of attempts answered 429 after the warm-up.
 *
 * <pre>java -cp ... io.dspark.vllm.request.RequesterBench [seconds] [warmup-seconds] [one | rounds=N]</pre>
 */
public final class RequesterBench {
    private RequesterBench() {}

    /** Each answer closes its connection (BENCH_CLOSE=1): no keep-alive connection is reused. */
    static final boolean CLOSE = System.getenv("BENCH_CLOSE") != null;

    public static void main(String[] args) throws Exception {
        int seconds = args.length > 0 ? Integer.parseInt(args[0]) : 20;
        int warmup = args.length > 1 ? Integer.parseInt(args[1]) : 5;
        if (System.getenv("TRACE") != null) {
            long t0 = System.nanoTime();
            Slots.trace = m -> System.out.println(String.format(Locale.ROOT, "  %6.2f s  %s",
                    (System.nanoTime() - t0) / 1e9, m));
        }
        if (args.length > 2 && args[2].equals("one")) {
            run("adaptive 64 (1..256)", true, 64, 1, 256, seconds, warmup);
            return;
        }
        if (args.length > 2 && args[2].startsWith("rounds=")) { // interleaved, for a noisy machine
            for (int round = Integer.parseInt(args[2].substring(7)); round > 0; round--) {
                run("adaptive 4 (1..256)", true, 4, 1, 256, seconds, warmup);
                run("fixed 16", false, 16, 16, 16, seconds, warmup);
                run("adaptive 64 (1..256)", true, 64, 1, 256, seconds, warmup);
            }
            return;
        }
        run("adaptive 64 (1..256)", true, 64, 1, 256, seconds, warmup);
        run("adaptive 4 (1..256)", true, 4, 1, 256, seconds, warmup);
        run("fixed 64", false, 64, 64, 64, seconds, warmup);
        run("fixed 16", false, 16, 16, 16, seconds, warmup);
    }

    static void run(String name, boolean adaptive, int initial, int min, int max, int seconds, int warmup)
            throws Exception {
        AtomicInteger busy = new AtomicInteger();
        AtomicLong answered = new AtomicLong();
        AtomicLong refused = new AtomicLong();
        try (Servers.Web web = new Servers.Web((x, s) -> {
            answered.incrementAndGet();
            if (busy.incrementAndGet() > 16) {
                busy.decrementAndGet();
                refused.incrementAndGet();
                Servers.respond(x, 429, "{\"error\":{\"message\":\"too many\"}}", "Retry-After", "1");
                return;
            }
            try {
                Thread.sleep(100);
                if (CLOSE) {
                    Servers.respond(x, 200, Servers.OK_BODY, "Connection", "close");
                } else {
                    Servers.respond(x, 200, Servers.OK_BODY);
                }
            } finally {
                busy.decrementAndGet();
            }
        })) {
            ObjectNode sp = Servers.spec(web.base);
            sp.put("deadline_s", 120.0);
            ((ObjectNode) sp.get("concurrency")).put("adaptive", adaptive).put("initial", initial).put("min", min)
                    .put("max", max);
            AtomicLong ok = new AtomicLong();
            AtomicLong failed = new AtomicLong();
            Semaphore capacity = new Semaphore(max);
            try (Requester r = new Requester(Servers.of(sp))) {
                long start = System.nanoTime();
                long end = start + seconds * 1_000_000_000L;
                long warm = start + warmup * 1_000_000_000L;
                long okAtWarm = -1;
                long answeredAtWarm = 0;
                long refusedAtWarm = 0;
                int lowest = Integer.MAX_VALUE;
                int highest = 0;
                long samples = 0;
                long sum = 0;
                int i = 0;
                while (System.nanoTime() < end) {
                    if (okAtWarm < 0 && System.nanoTime() >= warm) {
                        okAtWarm = ok.get();
                        answeredAtWarm = answered.get();
                        refusedAtWarm = refused.get();
                    }
                    if (okAtWarm >= 0) {
                        int l = r.concurrencyLimit();
                        lowest = Math.min(lowest, l);
                        highest = Math.max(highest, l);
                        sum += l;
                        samples++;
                    }
                    if (!capacity.tryAcquire(10, java.util.concurrent.TimeUnit.MILLISECONDS)) {
                        continue;
                    }
                    r.send("p" + i, "id" + i++).whenComplete((o, e) -> {
                        (o.ok() ? ok : failed).incrementAndGet();
                        capacity.release();
                    });
                }
                double span = (System.nanoTime() - warm) / 1e9;
                long rows = ok.get() - okAtWarm;
                long attempts = answered.get() - answeredAtWarm;
                long throttled = refused.get() - refusedAtWarm;
                System.out.println(String.format(Locale.ROOT,
                        "%-22s %6.1f rows/s (%4.1f%% of 160)  429: %5.2f%% of %d attempts  limit %d..%d, mean %.1f"
                                + "  failed %d",
                        name, rows / span, 100 * rows / span / 160, 100.0 * throttled / Math.max(1, attempts),
                        attempts, lowest, highest, (double) sum / Math.max(1, samples), failed.get()));
            }
        }
    }
}
