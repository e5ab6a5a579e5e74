package io.dspark.vllm.sql;

import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiter;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;

/**
 * 'prompts.rate' for Flink's DataGeneratorSource: records per second across the source's parallel instances,
 * as {@code RateLimiterStrategy.perSecond} gives, with up to one second's worth stored while the source is held
 * back (Guava's bursty limiter, which that strategy uses, does the same). The difference is where the wait
 * happens: Flink's limiter hands every record to a thread of its own and back ({@code GuavaRateLimiter.acquire}
 * runs Guava's blocking acquire there), two thread switches per record, which at thousands of records per
 * second cost a tenth of a core (a CPU profile of the zero-latency benchmark). Here a record that is due goes
 * at once, on the task's thread; only one ahead of its time waits, on one timer thread shared by the JVM.
 */
public final class PacedRate<S extends SourceSplit> implements RateLimiterStrategy<S> {
    private static final long serialVersionUID = 1L;
    private static final CompletableFuture<Void> NOW = CompletableFuture.completedFuture(null);

    private final double perSecond;

    public PacedRate(double perSecond) {
        if (!(perSecond > 0)) {
            throw new IllegalArgumentException("dspark-vllm: a rate must be above 0, not " + perSecond);
        }
        this.perSecond = perSecond;
    }

    @Override
    public RateLimiter<S> createRateLimiter(int parallelism) {
        return new Limiter<>(perSecond / Math.max(1, parallelism), System::nanoTime);
    }

    /** The timer that completes the waits, a daemon thread made on first use. */
    private static final class Timer {
        static final ScheduledExecutorService INSTANCE = make();

        private static ScheduledExecutorService make() {
            ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, r -> {
                Thread thread = new Thread(r, "dspark-vllm-prompt-rate");
                thread.setDaemon(true);
                return thread;
            });
            t.setRemoveOnCancelPolicy(true);
            return t;
        }
    }

    /** One instance's limiter; {@code clock}: nanoseconds, System.nanoTime (a test's own clock in the tests). */
    public static final class Limiter<S extends SourceSplit> implements RateLimiter<S> {
        private final double intervalNs;
        private final double burstNs;
        private final LongSupplier clock;
        private double next = Double.NaN; // when the next record is due

        public Limiter(double perSecond, LongSupplier clock) {
            this.intervalNs = 1e9 / perSecond;
            this.burstNs = 1e9;
            this.clock = clock;
        }

        @Override
        public CompletionStage<Void> acquire(int records) {
            long now = clock.getAsLong();
            double due = Double.isNaN(next) ? now : Math.max(next, now - burstNs);
            next = due + records * intervalNs;
            if (due <= now) {
                return NOW;
            }
            CompletableFuture<Void> go = new CompletableFuture<>();
            Timer.INSTANCE.schedule(() -> go.complete(null), (long) (due - now), TimeUnit.NANOSECONDS);
            return go;
        }
    }
}
