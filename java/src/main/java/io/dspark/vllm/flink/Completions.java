package io.dspark.vllm.flink;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.IntSupplier;

/**
 * What completes together is handled as one batch, on a thread of its own: items added from any thread (the
 * request step's completions) are handed to {@code handle} in batches of at most {@code batchSize}, a batch
 * leaving when full or {@code batchMillis} after its first item was added, whichever comes first (the plan's
 * {@code batch_size} and {@code batch_ms}, the table's parse step's rule), and never holding more than an eighth
 * of the items {@code outstanding} (the model's rows in flight: a row held here is a slot of Flink's async
 * operator with no request on the wire, so at high rates the batch leaves as soon as it would starve the
 * requests). No item waits longer than that plus the batch before it; each item is handed on exactly once, in
 * the order it was added.
 *
 * <p>{@code handle} must not throw: what it throws is logged and costs that batch only (the model completes its
 * rows' futures in it, exceptionally where it must).
 */
final class Completions<T> implements AutoCloseable {
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(Completions.class);

    private static final class Added<T> {
        final T item;
        final long at;

        Added(T item, long at) {
            this.item = item;
            this.at = at;
        }
    }

    private final int batchSize;
    private final long batchNanos;
    private final IntSupplier outstanding;
    private final Consumer<List<T>> handle;
    private final LinkedBlockingQueue<Added<T>> queue = new LinkedBlockingQueue<>();
    private final Thread thread;
    private volatile boolean closing;
    private long items;
    private long batches;

    Completions(String name, int batchSize, long batchMillis, IntSupplier outstanding, Consumer<List<T>> handle) {
        this.batchSize = Math.max(1, batchSize);
        this.batchNanos = Math.max(0, batchMillis) * 1_000_000L;
        this.outstanding = outstanding;
        this.handle = handle;
        thread = new Thread(this::loop, name);
        thread.setDaemon(true);
        thread.start();
    }

    /** Adds an item, from any thread. */
    void add(T item) {
        queue.add(new Added<>(item, System.nanoTime()));
    }

    /** Items handed on so far, and in how many batches (read after {@link #close()}, or from the thread). */
    long items() {
        return items;
    }

    long batches() {
        return batches;
    }

    private void loop() {
        List<Added<T>> taken = new ArrayList<>();
        List<T> batch = new ArrayList<>();
        while (!closing) {
            try {
                Added<T> first = queue.poll(200, TimeUnit.MILLISECONDS);
                if (first == null) {
                    continue;
                }
                taken.add(first);
                long due = first.at + batchNanos;
                while (taken.size() < batchSize) {
                    queue.drainTo(taken, batchSize - taken.size());
                    long left = due - System.nanoTime();
                    if (taken.size() >= batchSize || left <= 0 || taken.size() * 8 >= outstanding.getAsInt()) {
                        break;
                    }
                    Added<T> next = queue.poll(left, TimeUnit.NANOSECONDS);
                    if (next == null) {
                        break;
                    }
                    taken.add(next);
                }
                for (Added<T> a : taken) {
                    batch.add(a.item);
                }
                items += batch.size();
                batches++;
                try {
                    handle.accept(batch);
                } catch (RuntimeException e) { // a defect of ours: logged, and the loop goes on with the next batch
                    LOG.error("dspark-vllm: a batch of {} completed requests could not be handled", batch.size(), e);
                }
            } catch (InterruptedException e) {
                return;
            } finally {
                taken.clear();
                batch.clear();
            }
        }
    }

    @Override
    public void close() throws InterruptedException {
        closing = true;
        thread.interrupt();
        thread.join(10_000);
    }
}
