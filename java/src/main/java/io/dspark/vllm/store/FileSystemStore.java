package io.dspark.vllm.store;

import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.fs.FSDataOutputStream;
import org.apache.flink.core.fs.FileStatus;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
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
 * A record cut short by a crash ends the file's index; a record whose CRC does not match is not answered from.
 * Puts are written by one thread, a batch at a time (what arrived while the last batch was written), each batch
 * flushed and synced before its futures complete. Memory: the index only (about 150 bytes per response).
 */
public final class FileSystemStore implements ResponseStore {
    static final int MAGIC = 0x44535231; // "DSR1"
    static final int KEY_BYTES = 32;
    private static final int HEADER = 4 + 4;
    private static final int FIXED = KEY_BYTES * 2 + 8 + 4 + 8 + 4;

    private final Path folder;
    private final FileSystem fs;
    private final String name;
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

    /** Opens the folder {@code uri} (made if missing) and indexes the records in it. */
    public FileSystemStore(String uri, int subtask) throws IOException {
        folder = new Path(uri);
        fs = folder.getFileSystem();
        fs.mkdirs(folder);
        FileStatus[] listed = fs.listStatus(folder);
        if (listed != null) {
            for (FileStatus status : listed) {
                if (!status.isDir() && status.getPath().getName().endsWith(".responses")) {
                    indexFile(status.getPath(), status.getLen());
                }
            }
        }
        name = "part-" + subtask + "-" + System.currentTimeMillis() + "-"
                + UUID.randomUUID().toString().substring(0, 8) + ".responses";
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

    private void indexFile(Path path, long length) throws IOException {
        int id = addFile(path);
        try (DataInputStream in = new DataInputStream(new java.io.BufferedInputStream(fs.open(path), 1 << 16))) {
            long pos = 0;
            byte[] key = new byte[KEY_BYTES];
            byte[] cacheKey = new byte[KEY_BYTES];
            while (pos + HEADER + FIXED + 4 <= length) {
                int magic = in.readInt();
                int size = in.readInt();
                if (magic != MAGIC || size < FIXED || pos + HEADER + size + 4 > length) {
                    return; // a record cut short (the writer died in it) or not ours: the file's index ends here
                }
                in.readFully(key);
                in.readFully(cacheKey);
                long storedAt = in.readLong();
                skipFully(in, size - KEY_BYTES * 2 - 8 + 4);
                long[] at = {id, pos, HEADER + size + 4, storedAt};
                index.put(ByteBuffer.wrap(key.clone()), at);
                newest(ByteBuffer.wrap(cacheKey.clone()), at);
                pos += HEADER + size + 4;
            }
        }
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
        cacheIndex.merge(cacheKey, at, (old, now) -> now[3] >= old[3] ? now : old);
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
                    throw new EOFException("the record at " + at[1] + " of " + file(id) + " is cut short");
                }
                done += n;
            }
        }
        return decode(record, "the record at " + at[1] + " of " + file(id));
    }

    /**
     * A record's response ({@link #record}'s layout; the Kafka store's values are records too), or an
     * IOException naming {@code what} when it is not whole or its CRC does not match.
     */
    static Stored decode(byte[] record, String what) throws IOException {
        ByteBuffer b = ByteBuffer.wrap(record);
        if (record.length < HEADER + FIXED + 4 || b.getInt() != MAGIC) {
            throw new IOException(what + " is not a response record");
        }
        int size = b.getInt();
        if (size < FIXED || HEADER + size + 4 > record.length) {
            throw new IOException(what + " is cut short");
        }
        CRC32 crc = new CRC32();
        crc.update(record, HEADER, size);
        b.position(HEADER + size);
        if ((int) crc.getValue() != b.getInt()) {
            throw new IOException(what + " is damaged (CRC)");
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
                Path path = new Path(folder, name + (outFile < 0 ? "" : "." + files.size()));
                out = fs.create(path, FileSystem.WriteMode.NO_OVERWRITE);
                outFile = addFile(path);
                outPos = 0;
            }
            for (Put p : batch) {
                byte[] record = record(p.key, p.cacheKey, p.response);
                out.write(record);
                at.add(new long[] {outFile, outPos, record.length, p.response.storedAtMs});
                outPos += record.length;
            }
            out.flush();
            out.sync();
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
