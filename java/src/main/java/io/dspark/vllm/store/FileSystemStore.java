package io.dspark.vllm.store;

import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.fs.FSDataOutputStream;
import org.apache.flink.core.fs.FileStatus;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.FutureTask;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import java.util.zip.CRC32;

/**
 * A {@link ResponseStore} in a folder of Flink's {@link FileSystem} (file://, s3://, hdfs://: wherever checkpoints
 * can go). Each opening writes its own file, {@code part-<subtask>-<millis>-<random>.responses}, so no two
 * writers share one; it indexes every file already in the folder when it opens (all subtasks' files: a rescaled
 * job finds its keys wherever they were written). A file is a sequence of records:
 *
 * <pre>
 * int magic 'DSR1' | int length (of what follows up to the CRC) | byte[32] key | byte[32] cache key
 * | long stored-at ms | int status | long received-at ms | int body length | body | int CRC-32 of the record
 * </pre>
 *
 * A record cut short by a crash ends the file's index. A damaged record is skipped, never answered from: one whose
 * header is not whole is left out of the index at opening, which goes on at the next whole record (found by its
 * magic and CRC); one whose CRC does not match is a {@link Damaged} lookup. Only regular files are read (a FIFO
 * would block its reader for ever), and opening gives up when it makes no progress for {@link #TIMEOUT} (a
 * network file system that hangs). Puts are written by one thread, a batch at a time (what arrived while the last
 * batch was written), each batch flushed and synced before its futures complete, and then the file is looked for:
 * a local file system takes the writes and syncs of a file whose folder was deleted, and drops them at its close.
 * Memory: the index only (about 150 bytes per response).
 */
public final class FileSystemStore implements ResponseStore {
    private static final Logger LOG = LoggerFactory.getLogger(FileSystemStore.class);
    static final int MAGIC = 0x44535231; // "DSR1"
    static final int KEY_BYTES = 32;
    private static final int HEADER = 4 + 4;
    private static final int FIXED = KEY_BYTES * 2 + 8 + 4 + 8 + 4;

    private final Path folder;
    private final FileSystem fs;
    private final String name; // of this opening's files: part-<subtask>-<millis>-<random>
    private final List<Path> files = new ArrayList<>();
    private final Map<Integer, FSDataInputStream> readers = new ConcurrentHashMap<>();
    private final Map<ByteBuffer, long[]> index = new ConcurrentHashMap<>(); // key -> {file, offset, length, at}
    private final Map<ByteBuffer, long[]> cacheIndex = new ConcurrentHashMap<>();
    private final LinkedBlockingQueue<Put> puts = new LinkedBlockingQueue<>();
    private final Thread writer;
    private volatile boolean closing;
    private FSDataOutputStream out; // the writer thread's
    private int outFile = -1;
    private long outPos;
    private Boolean outShown; // whether the file system shows the file being written (null: not looked yet)
    private final AtomicLong progress = new AtomicLong(); // opening's: bytes and files read
    private volatile String doing = "listing the folder"; // opening's, for a message
    private long damaged; // damaged records left out of the index at opening
    private String firstDamaged;

    private static final class Put {
        final byte[] key;
        final byte[] cacheKey;
        final Stored response;
        final CompletableFuture<Void> done = new CompletableFuture<>();

        Put(byte[] key, byte[] cacheKey, Stored response) {
            this.key = key;
            this.cacheKey = cacheKey;
            this.response = response;
        }
    }

    /**
     * Opens the folder {@code uri} (made if missing) and indexes the records in it; fails when that makes no
     * progress for {@link #TIMEOUT}.
     */
    public FileSystemStore(String uri, int subtask) throws IOException {
        this(uri, subtask, TIMEOUT);
    }

    FileSystemStore(String uri, int subtask, Duration stall) throws IOException {
        folder = new Path(uri);
        fs = folder.getFileSystem();
        bounded("opening " + folder, stall, progress, () -> doing, () -> {
            index();
            return null;
        });
        name = "part-" + subtask + "-" + System.currentTimeMillis() + "-"
                + UUID.randomUUID().toString().substring(0, 8);
        writer = new Thread(this::writeLoop, "dspark-vllm response store " + uri);
        writer.setDaemon(true);
        writer.start();
    }

    /** Responses indexed (read at opening and put since). */
    public int size() {
        return index.size();
    }

    @Override
    public String where() {
        return folder.toString();
    }

    private synchronized int addFile(Path path) {
        files.add(path);
        return files.size() - 1;
    }

    private synchronized Path file(int i) {
        return files.get(i);
    }

    /**
     * Runs {@code work} in a thread of its own and returns what it returns, or fails when {@code progress} has not
     * moved for {@code stall}: a file system call that hangs (a network file system that does not answer, a
     * FIFO) cannot be interrupted, so the thread is left to it (a daemon) and the caller goes on without it.
     */
    static <T> T bounded(String what, Duration stall, AtomicLong progress, Supplier<String> doing, Callable<T> work)
            throws IOException {
        FutureTask<T> task = new FutureTask<>(work);
        Thread thread = new Thread(task, "dspark-vllm " + what);
        thread.setDaemon(true);
        thread.start();
        long seen = progress.get();
        long since = System.nanoTime();
        while (true) {
            try {
                return task.get(100, TimeUnit.MILLISECONDS);
            } catch (TimeoutException e) {
                long now = progress.get();
                if (now != seen) {
                    seen = now;
                    since = System.nanoTime();
                } else if (System.nanoTime() - since > stall.toNanos()) {
                    thread.interrupt();
                    throw new IOException(what + " made no progress for " + seconds(stall) + " s ("
                            + doing.get() + "): a file system that does not answer?");
                }
            } catch (ExecutionException e) {
                Throwable cause = e.getCause();
                if (cause instanceof IOException) {
                    throw (IOException) cause;
                }
                throw new IOException(what + " failed: " + cause, cause);
            } catch (InterruptedException e) {
                thread.interrupt();
                Thread.currentThread().interrupt();
                throw new java.io.InterruptedIOException(what + " was interrupted");
            }
        }
    }

    /** A time in seconds for a message: 10, 0.2. */
    static String seconds(Duration d) {
        long ms = d.toMillis();
        return ms % 1000 == 0 ? String.valueOf(ms / 1000) : String.valueOf(ms / 1000.0);
    }

    /** Indexes the records of every store file in the folder (opening's work). */
    private void index() throws IOException {
        fs.mkdirs(folder);
        FileStatus[] listed = fs.listStatus(folder);
        progress.incrementAndGet();
        if (listed == null) {
            return;
        }
        for (FileStatus status : listed) {
            Path path = status.getPath();
            if (status.isDir() || !path.getName().endsWith(".responses")) {
                continue;
            }
            if (!regular(path)) {
                LOG.warn("dspark-vllm: the response store {} leaves {} alone: it is not a regular file", folder, path);
                continue;
            }
            doing = "reading " + path;
            indexFile(path, status.getLen());
            progress.incrementAndGet();
        }
        doing = "done";
    }

    /**
     * Whether a file of the folder is a regular file: Flink's file systems know files and folders only, and a local
     * one's "file" may be a FIFO (whose reader blocks until a writer comes), a device or a socket.
     */
    private boolean regular(Path path) {
        if (fs.isDistributedFS()) {
            return true;
        }
        return java.nio.file.Files.isRegularFile(java.nio.file.Paths.get(path.toUri().getPath()));
    }

    /**
     * Indexes a file's records. A header that is not whole (a damaged magic or length) would end the index and
     * lose every record after it: the next whole record (its magic, a length that fits and a CRC that matches) is
     * looked for, and the index goes on from it; the damaged bytes count as one damaged record. When there is none,
     * the file ends with a record cut short (the writer died in it) and its index ends there.
     */
    private void indexFile(Path path, long length) throws IOException {
        int id = addFile(path);
        long pos = 0;
        while (true) {
            long[] stopped = indexFrom(path, id, pos, length); // {where it stopped, the last record indexed or -1}
            if (stopped[0] + HEADER + FIXED + 4 > length) {
                return; // the file's end
            }
            long next = nextRecord(path, Math.max(stopped[1], pos - 1) + 1, length);
            if (next < 0) {
                return; // a record cut short (the writer died in it), or damage to the end
            }
            if (damaged++ == 0) {
                firstDamaged = "the record at " + stopped[0] + " of " + path + " is damaged (its header)";
            }
            pos = next;
        }
    }

    /** Indexes records from {@code pos} while their headers are whole; returns {where it stopped, last record}. */
    private long[] indexFrom(Path path, int id, long pos, long length) throws IOException {
        long last = -1;
        try (DataInputStream in = new DataInputStream(new java.io.BufferedInputStream(openAt(path, pos), 1 << 16))) {
            byte[] key = new byte[KEY_BYTES];
            byte[] cacheKey = new byte[KEY_BYTES];
            while (pos + HEADER + FIXED + 4 <= length) {
                int magic = in.readInt();
                int size = in.readInt();
                if (magic != MAGIC || size < FIXED || pos + HEADER + size + 4 > length) {
                    break;
                }
                in.readFully(key);
                in.readFully(cacheKey);
                long storedAt = in.readLong();
                skipFully(in, size - KEY_BYTES * 2 - 8 + 4);
                long[] at = {id, pos, HEADER + size + 4, storedAt};
                index.merge(ByteBuffer.wrap(key.clone()), at, FileSystemStore::newer);
                newest(ByteBuffer.wrap(cacheKey.clone()), at);
                last = pos;
                pos += HEADER + size + 4;
                progress.incrementAndGet();
            }
        }
        return new long[] {pos, last};
    }

    private FSDataInputStream openAt(Path path, long pos) throws IOException {
        FSDataInputStream in = fs.open(path);
        if (pos > 0) {
            in.seek(pos);
        }
        return in;
    }

    /** Where the first whole record at or after {@code from} starts, or -1. */
    private long nextRecord(Path path, long from, long length) throws IOException {
        try (java.io.InputStream in = new java.io.BufferedInputStream(openAt(path, from), 1 << 16)) {
            int last4 = 0;
            for (long pos = from; pos < length; pos++) {
                int b = in.read();
                if (b < 0) {
                    return -1;
                }
                last4 = (last4 << 8) | b;
                long start = pos - 3;
                if (start >= from && last4 == MAGIC && start + HEADER + FIXED + 4 <= length
                        && whole(path, start, length)) {
                    return start;
                }
                if ((pos & 0xFFFF) == 0) {
                    progress.incrementAndGet();
                }
            }
        }
        return -1;
    }

    /** Whether a whole record (a length that fits, a CRC that matches) starts at {@code pos}. */
    private boolean whole(Path path, long pos, long length) throws IOException {
        try (DataInputStream in = new DataInputStream(new java.io.BufferedInputStream(openAt(path, pos), 1 << 16))) {
            if (in.readInt() != MAGIC) {
                return false;
            }
            int size = in.readInt();
            if (size < FIXED || pos + HEADER + size + 4 > length) {
                return false;
            }
            CRC32 crc = new CRC32();
            byte[] chunk = new byte[1 << 16];
            for (int left = size; left > 0; ) {
                int n = in.read(chunk, 0, Math.min(left, chunk.length));
                if (n < 0) {
                    return false;
                }
                crc.update(chunk, 0, n);
                left -= n;
                progress.incrementAndGet();
            }
            return (int) crc.getValue() == in.readInt();
        }
    }

    @Override
    public Damaged damagedAtOpening() {
        return damaged == 0 ? null : new Damaged(
                damaged == 1 ? firstDamaged : damaged + " damaged records at opening, the first: " + firstDamaged,
                damaged);
    }

    private static void skipFully(DataInputStream in, long n) throws IOException {
        while (n > 0) {
            long skipped = in.skip(n);
            if (skipped <= 0) {
                throw new EOFException();
            }
            n -= skipped;
        }
    }

    private void newest(ByteBuffer cacheKey, long[] at) {
        cacheIndex.merge(cacheKey, at, FileSystemStore::newer);
    }

    /**
     * Of two records of a key, the one stored last: a key is written again when its record was damaged or lost, and
     * the files are indexed in no particular order.
     */
    private static long[] newer(long[] old, long[] now) {
        return now[3] >= old[3] ? now : old;
    }

    @Override
    public Stored lookup(byte[] key) throws IOException {
        long[] at = index.get(ByteBuffer.wrap(key));
        return at == null ? null : read(at);
    }

    @Override
    public Stored lookupCache(byte[] cacheKey, long notBeforeMs) throws IOException {
        long[] at = cacheIndex.get(ByteBuffer.wrap(cacheKey));
        return at == null || at[3] < notBeforeMs ? null : read(at);
    }

    private Stored read(long[] at) throws IOException {
        int id = (int) at[0];
        byte[] record = new byte[(int) at[2]];
        FSDataInputStream in = readers.computeIfAbsent(id, i -> {
            try {
                return fs.open(file(i));
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        });
        synchronized (in) {
            in.seek(at[1]);
            int done = 0;
            while (done < record.length) {
                int n = in.read(record, done, record.length - done);
                if (n < 0) {
                    throw new Damaged("the record at " + at[1] + " of " + file(id) + " is cut short", 1);
                }
                done += n;
            }
        }
        return decode(record, "the record at " + at[1] + " of " + file(id));
    }

    /**
     * A record's response ({@link #record}'s layout; the Kafka store's values are records too), or {@link Damaged}
     * naming {@code what} when it is not whole or its CRC does not match.
     */
    static Stored decode(byte[] record, String what) throws IOException {
        ByteBuffer b = ByteBuffer.wrap(record);
        if (record.length < HEADER + FIXED + 4 || b.getInt() != MAGIC) {
            throw new Damaged(what + " is not a response record", 1);
        }
        int size = b.getInt();
        if (size < FIXED || HEADER + size + 4 > record.length) {
            throw new Damaged(what + " is cut short", 1);
        }
        CRC32 crc = new CRC32();
        crc.update(record, HEADER, size);
        b.position(HEADER + size);
        if ((int) crc.getValue() != b.getInt()) {
            throw new Damaged(what + " is damaged (CRC)", 1);
        }
        b.position(HEADER + KEY_BYTES * 2);
        long storedAt = b.getLong();
        int status = b.getInt();
        long receivedAt = b.getLong();
        byte[] body = new byte[b.getInt()];
        b.get(body);
        return new Stored(body, status, receivedAt, storedAt);
    }

    /** A whole record's cache key (its second 32 bytes), for an index. */
    static byte[] cacheKeyOf(byte[] record) {
        return java.util.Arrays.copyOfRange(record, HEADER + KEY_BYTES, HEADER + KEY_BYTES * 2);
    }

    /** A whole record's stored-at time, for an index. */
    static long storedAtOf(byte[] record) {
        return ByteBuffer.wrap(record).getLong(HEADER + KEY_BYTES * 2);
    }

    @Override
    public CompletableFuture<Void> put(byte[] key, byte[] cacheKey, Stored response) {
        Put put = new Put(key, cacheKey, response);
        if (closing) {
            put.done.completeExceptionally(new IOException("the store is closed"));
        } else {
            puts.add(put);
        }
        return put.done;
    }

    static byte[] record(byte[] key, byte[] cacheKey, Stored r) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(HEADER + FIXED + r.body.length + 4);
        try (DataOutputStream data = new DataOutputStream(bytes)) {
            data.writeInt(MAGIC);
            data.writeInt(FIXED + r.body.length);
            data.write(key);
            data.write(cacheKey);
            data.writeLong(r.storedAtMs);
            data.writeInt(r.status);
            data.writeLong(r.receivedAtMs);
            data.writeInt(r.body.length);
            data.write(r.body);
        } catch (IOException e) {
            throw new IllegalStateException(e); // a byte array does not fail
        }
        byte[] record = java.util.Arrays.copyOf(bytes.toByteArray(), HEADER + FIXED + r.body.length + 4);
        CRC32 crc = new CRC32();
        crc.update(record, HEADER, FIXED + r.body.length);
        ByteBuffer.wrap(record).putInt(HEADER + FIXED + r.body.length, (int) crc.getValue());
        return record;
    }

    private void writeLoop() {
        List<Put> batch = new ArrayList<>();
        while (!closing || !puts.isEmpty()) {
            try {
                Put first = puts.poll(200, TimeUnit.MILLISECONDS);
                if (first == null) {
                    continue;
                }
                batch.add(first);
                puts.drainTo(batch, 1023);
                write(batch);
            } catch (InterruptedException e) {
                break;
            } finally {
                batch.clear();
            }
        }
        IOException closed = new IOException("the store is closed");
        for (Put p; (p = puts.poll()) != null; ) {
            p.done.completeExceptionally(closed);
        }
    }

    private void write(List<Put> batch) {
        List<long[]> at = new ArrayList<>(batch.size());
        try {
            if (out == null) {
                // after a failure, a file of its own again: part-...-<random>-<n>.responses (read by the next opening)
                Path path = new Path(folder, name + (outFile < 0 ? "" : "-" + files.size()) + ".responses");
                fs.mkdirs(folder); // made again if it was deleted
                out = fs.create(path, FileSystem.WriteMode.NO_OVERWRITE);
                outFile = addFile(path);
                outPos = 0;
                outShown = null;
            }
            for (Put p : batch) {
                byte[] record = record(p.key, p.cacheKey, p.response);
                out.write(record);
                at.add(new long[] {outFile, outPos, record.length, p.response.storedAtMs});
                outPos += record.length;
            }
            out.flush();
            out.sync();
            stillThere();
        } catch (IOException | RuntimeException e) {
            // The next batch starts a new file: what this one wrote is not indexed and may be cut short.
            try {
                if (out != null) {
                    out.close();
                }
            } catch (IOException ignored) {
                // already failing
            }
            out = null;
            for (Put p : batch) {
                p.done.completeExceptionally(e);
            }
            return;
        }
        for (int i = 0; i < batch.size(); i++) {
            Put p = batch.get(i);
            index.put(ByteBuffer.wrap(p.key), at.get(i));
            newest(ByteBuffer.wrap(p.cacheKey), at.get(i));
            p.done.complete(null);
        }
    }

    /**
     * Fails when the file being written is gone: a local file system takes the writes and syncs of a file whose
     * folder was deleted (or moved) and drops them at its close, so what it held is lost and no longer indexed. A
     * distributed one that does not show a file until it is closed (an object store) is not asked again.
     */
    private void stillThere() throws IOException {
        if (Boolean.FALSE.equals(outShown)) {
            return;
        }
        Path path = file(outFile);
        try {
            fs.getFileStatus(path);
            outShown = true;
            return;
        } catch (FileNotFoundException e) {
            if (outShown == null && fs.isDistributedFS()) {
                outShown = false;
                return;
            }
        }
        int gone = outFile;
        long lost = index.values().stream().filter(at -> at[0] == gone).count();
        index.values().removeIf(at -> at[0] == gone);
        cacheIndex.values().removeIf(at -> at[0] == gone);
        throw new IOException("the file " + path + " is gone (its folder deleted or moved?): the " + lost
                + " responses written to it are lost; the next put starts a new file");
    }

    @Override
    public void close() {
        closing = true;
        try {
            writer.join(30_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        try {
            if (out != null) {
                out.close();
            }
        } catch (IOException ignored) {
            // the records are synced; a failing close loses nothing indexed
        }
        for (FSDataInputStream in : readers.values()) {
            try {
                in.close();
            } catch (IOException ignored) {
                // read-only
            }
        }
    }
}
