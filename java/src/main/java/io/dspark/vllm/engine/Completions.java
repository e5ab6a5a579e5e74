package io.dspark.vllm.engine;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * What completes together is handled as one batch, on a thread of its own: items added from any thread (the
 * request step's completions) are handed to {@code handle} in batches of at most {@code batchSize}: each batch
 * is what was added while the previous one was handled, so a batch waits for no timer and no item waits for
 * more than the batch before it. Each item is handed on exactly once, in the order it was added.
 *
 * <p>It does not wait for more to come: a row the model holds is a slot of Flink's async operator with no
 * request on the wire, and waiting up to 5 ms for a batch (the table's parse step's rule) cost the model 9-15%
 * of its rows/s at zero latency (docs/benchmarks.md).
 *
 * <p>{@code handle} must not throw: what it throws is logged and costs that batch only (the model completes its
 * rows' futures in it, exceptionally where it must).
 */
final class Completions<T> implements AutoCloseable {
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(Completions.class);

    private final int batchSize;
    private final Consumer<List<T>> handle;
    private final LinkedBlockingQueue<T> queue = new LinkedBlockingQueue<>();
    private final Thread thread;
    private volatile boolean closing;
    private long items;
    private long batches;

    Completions(String name, int batchSize, Consumer<List<T>> handle) {
        this.batchSize = Math.max(1, batchSize);
        this.handle = handle;
        thread = new Thread(this::loop, name);
        thread.setDaemon(true);
        thread.start();
    }

    /** Adds an item, from any thread. */
    void add(T item) {
        queue.add(item);
    }

    /** Items handed on so far, and in how many batches (read after {@link #close()}, or from the thread). */
    long items() {
        return items;
    }

    long batches() {
        return batches;
    }

    private void loop() {
        List<T> batch = new ArrayList<>();
        while (!closing) {
            try {
                T first = queue.poll(200, TimeUnit.MILLISECONDS);
                if (first == null) {
                    continue;
                }
                batch.add(first);
                queue.drainTo(batch, batchSize - 1);
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
