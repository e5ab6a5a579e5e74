package io.dspark.vllm.request;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * Back-pressure while the server is down: an attempt that cannot connect, or gets
 * 502/503, closes the gate; from then on attempts wait at the gate (each no longer than its request's
 * deadline), and one probe ({@code GET} the health URL; success: a status below 500) is sent after each backoff
 * step. The gate opens on a probe that succeeds or on any attempt that reaches the server. Both changes are
 * logged once, as WARNING.
 *
 * <p>The backoff step goes back to the first only when an attempt reaches the server ({@link #open}), not when a
 * probe does: a gateway that answers the health URL but 503 to every completion would otherwise close the gate
 * after each attempt and have it reopened by the first, shortest, probe every time. Such a gate reopens after
 * longer and longer steps (up to {@code maxS}) until an attempt gets through.
 */
final class Gate {
    private static final Logger LOG = LoggerFactory.getLogger(Requester.class);

    private final Supplier<CompletableFuture<Boolean>> probe;
    private final ScheduledExecutorService timer;
    private final double initialS;
    private final double maxS;
    private final Random random;
    private final List<Waiter> waiters = new ArrayList<>();
    private boolean open = true;
    private boolean closedForGood;
    private long generation;
    private long closedAtNs;
    private Failure reason;
    private long probes;
    private long closures;
    private int step; // backoff steps since an attempt last reached the server
    private final String replica; // one of several replicas (its name in the log), or null: the one server
    private volatile Runnable onOpen = () -> { };
    private volatile Runnable onProbed = () -> { };

    Gate(Supplier<CompletableFuture<Boolean>> probe, ScheduledExecutorService timer, double initialS, double maxS,
            Random random) {
        this(probe, timer, initialS, maxS, random, null);
    }

    /** The health of one of several replicas: closed, it is ejected (see {@link Replicas}). */
    Gate(Supplier<CompletableFuture<Boolean>> probe, ScheduledExecutorService timer, double initialS, double maxS,
            Random random, String replica) {
        this.replica = replica;
        this.probe = probe;
        this.timer = timer;
        this.initialS = initialS;
        this.maxS = maxS;
        this.random = random;
    }

    synchronized boolean isOpen() {
        return open;
    }

    synchronized Failure reason() {
        return reason;
    }

    synchronized long probes() {
        return probes;
    }

    synchronized long closures() {
        return closures;
    }

    void close(Failure why) {
        long gen;
        synchronized (this) {
            reason = why;
            if (!open || closedForGood) {
                return;
            }
            open = false;
            closures++;
            closedAtNs = System.nanoTime();
            gen = ++generation;
        }
        if (replica == null) {
            LOG.warn("dspark-vllm: the server looks down ({}): holding requests back until it answers again",
                    why.text());
        } else {
            LOG.warn("dspark-vllm: replica {} looks down ({}): the others take its requests until it answers again",
                    replica, why.text());
        }
        probeLater(gen);
    }

    /** An attempt reached the server: open the gate, and the next outage starts from the first step. */
    void open() {
        synchronized (this) {
            step = 0;
        }
        reopen(false);
    }

    private void reopen(boolean probed) {
        List<Waiter> go;
        double downS;
        synchronized (this) {
            if (open) {
                return;
            }
            if (probed) {
                onProbed.run(); // before it is open: no attempt may pass it first
            }
            open = true;
            downS = (System.nanoTime() - closedAtNs) / 1e9;
            go = new ArrayList<>(waiters);
            waiters.clear();
        }
        if (replica == null) {
            LOG.warn("dspark-vllm: the server answers again after {} s: requests go on", Text.oneDecimal(downS));
        } else {
            LOG.warn("dspark-vllm: replica {} answers again after {} s: it takes requests again", replica,
                    Text.oneDecimal(downS));
        }
        for (Waiter w : go) {
            w.fire(true);
        }
        onOpen.run();
    }

    /** Call {@code then} with true once the gate is open, or with false after {@code timeoutS}. */
    void await(double timeoutS, Consumer<Boolean> then) {
        Waiter w = new Waiter(then);
        synchronized (this) {
            if (!open && timeoutS > 0) {
                try {
                    w.timeout = timer.schedule(() -> {
                        synchronized (this) {
                            waiters.remove(w);
                        }
                        w.fire(false);
                    }, (long) (timeoutS * 1e9), TimeUnit.NANOSECONDS);
                    waiters.add(w);
                    return;
                } catch (java.util.concurrent.RejectedExecutionException e) {
                    // closed: answer at once (the requester ends its requests itself)
                }
            }
        }
        w.fire(isOpen());
    }

    /** Run after each opening (the replicas' queue and holds go on). */
    void onOpen(Runnable r) {
        onOpen = r;
    }

    /**
     * Run when a probe opens it, before it is open, under its lock (a replica goes on probation): it must take no
     * lock of the caller's.
     */
    void onProbed(Runnable r) {
        onProbed = r;
    }

    /** No more probes (close of the requester). */
    synchronized void shutdown() {
        closedForGood = true;
        generation++;
        waiters.clear();
    }

    private void probeLater(long gen) {
        int s;
        synchronized (this) {
            if (open || gen != generation) {
                return;
            }
            s = step < Integer.MAX_VALUE ? ++step : step;
        }
        double delay = Requester.backoff(s, initialS, maxS, random);
        try {
            timer.schedule(() -> probeNow(gen), (long) (delay * 1e9), TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // closed
        }
    }

    private void probeNow(long gen) {
        synchronized (this) {
            if (open || gen != generation) {
                return;
            }
            probes++;
        }
        CompletableFuture<Boolean> answer;
        try {
            answer = probe.get();
        } catch (RuntimeException e) {
            // A bug in a probe must not end the probing: the gate would stay closed for good.
            LOG.error("dspark-vllm: probing the server failed unexpectedly; probing again after the next step", e);
            answer = CompletableFuture.completedFuture(false);
        }
        answer.whenComplete((ok, e) -> {
            if (e == null && Boolean.TRUE.equals(ok)) {
                reopen(true); // (the step is kept: see the class comment)
            } else {
                probeLater(gen);
            }
        });
    }

    /** One caller held while the server is down: fired once, when the way opens or its wait times out. */
    static final class Waiter {
        private final Consumer<Boolean> then;
        private final AtomicBoolean fired = new AtomicBoolean();
        volatile ScheduledFuture<?> timeout;

        Waiter(Consumer<Boolean> then) {
            this.then = then;
        }

        void fire(boolean opened) {
            if (fired.compareAndSet(false, true)) {
                ScheduledFuture<?> t = timeout;
                if (t != null) {
                    t.cancel(false);
                }
                then.accept(opened);
            }
        }
    }
}
