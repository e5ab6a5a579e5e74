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
        assertThrows(IOException.class, () -> again.lookup(key("a")));
        again.close();
    }

    @Test
    void aFolderThatIsAFileCannotBeOpened() throws Exception {
        Path file = dir.resolve("not-a-folder");
        Files.write(file, new byte[] {1});
        assertThrows(IOException.class, () -> new FileSystemStore(file.toUri().toString(), 0));
    }

    @TempDir
    Path dir;
}
