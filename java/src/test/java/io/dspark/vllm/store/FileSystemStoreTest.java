package io.dspark.vllm.store;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The filesystem response store on the local file system: what one opening puts, the next one finds (by request
 * key, and by cache key within a time); a record cut short by a crash ends its file's index; a damaged record is
 * an error, never an answer.
 */
@Timeout(60)
final class FileSystemStoreTest {
    private static byte[] key(String s) {
        return StoredRequests.digest(s.getBytes(StandardCharsets.UTF_8));
    }

    private static ResponseStore.Stored response(String body, long at) {
        return new ResponseStore.Stored(body.getBytes(StandardCharsets.UTF_8), 200, at - 5, at);
    }

    private static List<Path> files(Path dir) throws IOException {
        try (Stream<Path> s = Files.list(dir)) {
            return s.sorted().collect(Collectors.toList());
        }
    }

    @Test
    void whatOneOpeningPutsTheNextFinds() throws Exception {
        @SuppressWarnings("resource")
        FileSystemStore first = new FileSystemStore(dir.toUri().toString(), 0);
        first.put(key("a"), key("same body"), response("{\"a\":1}", 1_000)).get(10, TimeUnit.SECONDS);
        first.put(key("b"), key("same body"), response("{\"b\":2}", 2_000)).get(10, TimeUnit.SECONDS);
        assertArrayEquals("{\"a\":1}".getBytes(StandardCharsets.UTF_8), first.lookup(key("a")).body);
        first.close();

        FileSystemStore second = new FileSystemStore(dir.toUri().toString(), 1);
        assertEquals(2, second.size());
        ResponseStore.Stored b = second.lookup(key("b"));
        assertNotNull(b);
        assertEquals(200, b.status);
        assertEquals(1_995, b.receivedAtMs);
        assertNull(second.lookup(key("c")));
        // the cache key's newest response, only when stored at or after the bound
        assertArrayEquals("{\"b\":2}".getBytes(StandardCharsets.UTF_8), second.lookupCache(key("same body"), 1_500).body);
        assertNull(second.lookupCache(key("same body"), 2_001));
        second.close();
    }

    @Test
    void aRecordCutShortEndsItsFilesIndex() throws Exception {
        FileSystemStore store = new FileSystemStore(dir.toUri().toString(), 0);
        store.put(key("a"), key("x"), response("{\"a\":1}", 1)).get(10, TimeUnit.SECONDS);
        store.put(key("b"), key("y"), response("{\"b\":2}", 2)).get(10, TimeUnit.SECONDS);
        store.close();
        Path file = files(dir).get(0);
        try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "rw")) {
            f.setLength(f.length() - 3); // the writer died inside its last record
        }
        FileSystemStore again = new FileSystemStore(dir.toUri().toString(), 0);
        assertNotNull(again.lookup(key("a")));
        assertNull(again.lookup(key("b")));
        assertNull(again.damagedAtOpening()); // a crash's, not damage
        again.close();
    }

    @Test
    void aDamagedRecordIsAnErrorNotAnAnswer() throws Exception {
        FileSystemStore store = new FileSystemStore(dir.toUri().toString(), 0);
        store.put(key("a"), key("x"), response("{\"answer\":\"yes\"}", 1)).get(10, TimeUnit.SECONDS);
        store.close();
        Path file = files(dir).get(0);
        try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "rw")) {
            f.seek(f.length() - 8); // inside the body
            f.write('X');
        }
        FileSystemStore again = new FileSystemStore(dir.toUri().toString(), 0);
        // that record is damaged (skipped by the request step), not the store: a Damaged, not another IOException
        ResponseStore.Damaged damaged = assertThrows(ResponseStore.Damaged.class, () -> again.lookup(key("a")));
        assertTrue(damaged.getMessage().endsWith("is damaged (CRC)"), damaged.getMessage());
        again.close();
    }

    @Test
    void aFolderThatIsAFileCannotBeOpened() throws Exception {
        Path file = dir.resolve("not-a-folder");
        Files.write(file, new byte[] {1});
        assertThrows(IOException.class, () -> new FileSystemStore(file.toUri().toString(), 0));
    }

    /** Every record's offset in a store file (walking the records' length fields). */
    static List<Long> offsets(Path file) throws IOException {
        java.nio.ByteBuffer b = java.nio.ByteBuffer.wrap(Files.readAllBytes(file));
        List<Long> at = new java.util.ArrayList<>();
        for (int pos = 0; pos + 8 <= b.capacity(); pos += 8 + b.getInt(pos + 4) + 4) {
            at.add((long) pos);
        }
        return at;
    }

    /** A FIFO (a named pipe) at {@code path}: opening it for reading blocks until a writer comes. */
    static void mkfifo(Path path) throws Exception {
        Process p = new ProcessBuilder("mkfifo", path.toString()).inheritIO().start();
        assertEquals(0, p.waitFor());
    }

    /** A FIFO named as a store file hung the opening (its open blocks for ever): it is not a regular file. */
    @Test
    @Timeout(value = 30, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void aFifoInTheFolderIsSkipped() throws Exception {
        FileSystemStore store = new FileSystemStore(dir.toUri().toString(), 0);
        store.put(key("a"), key("x"), response("{\"a\":1}", 1)).get(10, TimeUnit.SECONDS);
        store.close();
        mkfifo(dir.resolve("part-7-1-fifo.responses"));
        FileSystemStore again = new FileSystemStore(dir.toUri().toString(), 0);
        assertNotNull(again.lookup(key("a")));
        again.close();
    }

    /**
     * Opening is bounded: a call that makes no progress (a network file system that hangs; here the open of a
     * FIFO, which blocks until a writer comes) fails opening after the stall, saying what it was doing.
     */
    @Test
    void openingGivesUpWhenItMakesNoProgress() throws Exception {
        Path fifo = dir.resolve("hangs");
        mkfifo(fifo);
        IOException stalled = assertThrows(IOException.class, () -> FileSystemStore.bounded("opening the store",
                java.time.Duration.ofMillis(300), new java.util.concurrent.atomic.AtomicLong(), () -> "reading " + fifo,
                () -> new java.io.FileInputStream(fifo.toFile())));
        assertEquals("opening the store made no progress for 0.3 s (reading " + fifo
                + "): a file system that does not answer?", stalled.getMessage());
        new java.io.FileOutputStream(fifo.toFile()).close(); // lets the thread left in the open go
    }

    /**
     * The folder deleted while the store writes: a local file system takes the writes and syncs of the open file
     * and drops it at its close, so a put must fail (what the deleted file held is lost, and no longer answered),
     * and the next put goes to a new file in the folder made again.
     */
    @Test
    void aPutToAFolderDeletedMidRunFails() throws Exception {
        Path folder = dir.resolve("store");
        FileSystemStore store = new FileSystemStore(folder.toUri().toString(), 0);
        store.put(key("a"), key("x"), response("{\"a\":1}", 1)).get(10, TimeUnit.SECONDS);
        for (Path f : files(folder)) {
            Files.delete(f);
        }
        Files.delete(folder);
        java.util.concurrent.ExecutionException failed = assertThrows(java.util.concurrent.ExecutionException.class,
                () -> store.put(key("b"), key("y"), response("{\"b\":2}", 2)).get(10, TimeUnit.SECONDS));
        assertTrue(failed.getCause().getMessage().contains("is gone"), failed.getCause().getMessage());
        assertNull(store.lookup(key("a"))); // its file is gone
        store.put(key("c"), key("z"), response("{\"c\":3}", 3)).get(10, TimeUnit.SECONDS);
        store.close();
        FileSystemStore again = new FileSystemStore(folder.toUri().toString(), 0);
        assertEquals(1, again.size());
        assertNotNull(again.lookup(key("c")));
        again.close();
    }

    /**
     * A record whose header is damaged (its magic, or a length that no longer fits) ended its file's index, so
     * every record after it was paid again: it is skipped, counted, and the records after it are indexed.
     */
    @Test
    void aDamagedHeaderSkipsItsRecordNotTheRest() throws Exception {
        FileSystemStore store = new FileSystemStore(dir.toUri().toString(), 0);
        for (String k : new String[] {"a", "b", "c", "d"}) {
            store.put(key(k), key(k), response("{\"" + k + "\":1}", 1)).get(10, TimeUnit.SECONDS);
        }
        store.close();
        Path file = files(dir).get(0);
        List<Long> at = offsets(file);
        try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "rw")) {
            f.seek(at.get(1)); // b's magic
            f.write('X');
            f.seek(at.get(2) + 4); // c's length: past the file's end
            f.writeInt(1 << 30);
        }
        FileSystemStore again = new FileSystemStore(dir.toUri().toString(), 0);
        assertNotNull(again.lookup(key("a")));
        assertNull(again.lookup(key("b")));
        assertNull(again.lookup(key("c")));
        assertNotNull(again.lookup(key("d")));
        assertEquals(1, again.damagedAtOpening().count); // b and c: one damaged stretch
        assertTrue(again.damagedAtOpening().getMessage().startsWith("the record at " + at.get(1) + " of "),
                again.damagedAtOpening().getMessage());
        again.close();
    }

    @TempDir
    Path dir;
}
