package io.dspark.vllm.parse;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;

/**
 * The native parser core (native/dspark_core.cpp) in the JVM: its one C ABI entry point through a JNI shim
 * (native/jni/dspark_jni.c). Both libraries travel inside the connector's jar, under
 * {@code io/dspark/vllm/native/linux-x86_64/}, and are copied to a temporary folder, loaded once per JVM (as
 * zstd-jni and snappy-java load theirs) and deleted at once (what is loaded stays mapped); the system property {@code dspark.native.dir} (or the variable
 * {@code DSPARK_NATIVE_DIR}) names a folder to load them from instead. The core has a build per x86-64
 * level; the one for this CPU is chosen from /proc/cpuinfo as the Python loader chooses
 * (connector/parse/native.py).
 */
public final class NativeCore {

    // The core's ABI version and return codes: CoreContract, generated from native/contract.py (the shim checks
    // the version on load).
    private static final String RESOURCES = "/io/dspark/vllm/native/linux-x86_64/";
    private static final String SHIM = "libdspark-jni.so";

    private static String problem;
    private static boolean loaded;

    private NativeCore() {}

    /** Loads the core once; null when it is there, else why not (one line for the user). */
    public static synchronized String available() {
        if (!loaded && problem == null) {
            String given = System.getProperty("dspark.native.dir", System.getenv("DSPARK_NATIVE_DIR"));
            boolean fromGiven = given != null && !given.isEmpty();
            Path folder = null;
            Path shimCopy = null;
            try {
                folder = fromGiven ? Paths.get(given) : unpacked();
                Path shim = folder.resolve(SHIM);
                if (fromGiven) {
                    // The JVM lets one file be loaded by one classloader only, and Flink gives every job its own
                    // (a second job on a TaskManager failed with "already loaded in another classloader"): the
                    // shim is loaded from a copy of its own, as from the jar. (The core is dlopen()ed by the shim,
                    // which the JVM does not track.)
                    shimCopy = Files.createTempDirectory("dspark-vllm-native-");
                    shim = Files.copy(shim, shimCopy.resolve(SHIM));
                }
                System.load(shim.toString());
                String failed = load(folder.resolve(coreName()).toString());
                if (failed != null) {
                    problem = "the native parser core did not load: " + failed;
                } else {
                    loaded = true;
                }
            } catch (IOException | UnsatisfiedLinkError | SecurityException e) {
                problem = "the native parser core did not load: "
                        + (e instanceof java.nio.file.NoSuchFileException ? "no file " : "") + e.getMessage();
            } finally {
                if (folder != null && !fromGiven) {
                    remove(folder); // loaded libraries stay mapped: nothing is left behind, even if the JVM is killed
                }
                if (shimCopy != null) {
                    remove(shimCopy);
                }
            }
        }
        return loaded ? null : problem;
    }

    /**
     * Whether the core loads here, and which build: {@code java -cp dspark-vllm-flink-VERSION.jar
     * io.dspark.vllm.parse.NativeCore} (exit status 0 when it does), to check a TaskManager's image.
     */
    public static void main(String[] args) {
        String why = available();
        if (why != null) {
            System.err.println("dspark-vllm: " + why);
            System.exit(1);
        }
        System.out.println("dspark-vllm: the native parser core loads here (" + coreName() + ", ABI "
                + CoreContract.ABI_VERSION + ")");
    }

    /** The core's result for {@code bodies[from..to)}; the caller closes it. Throws IllegalStateException on a defect. */
    static Result parse(byte[] plan, byte[][] bodies, int from, int to) {
        String why = available();
        if (why != null) {
            throw new IllegalStateException(why);
        }
        byte[] error = new byte[512];
        long handle = parse(plan, bodies, from, to, error);
        if (handle <= 0) {
            int end = 0;
            while (end < error.length && error[end] != 0) {
                end++;
            }
            return new Result(0, (int) -handle, new String(error, 0, end, StandardCharsets.UTF_8));
        }
        return new Result(handle, CoreContract.DONE, null);
    }

    /** What one call gave: a struct array to read (then close), or a code and its message. */
    static final class Result implements AutoCloseable {
        final long handle;
        final int code;
        final String message;
        private boolean closed;

        Result(long handle, int code, String message) {
            this.handle = handle;
            this.code = code;
            this.message = message;
        }

        /** Every column, copied out of native memory in one call (native/jni/dspark_jni.c says how). */
        java.util.List<java.util.Map.Entry<String, ArrowColumn>> columns() {
            if (closed || handle == 0) { // the shim would read freed memory, or none
                throw new IllegalStateException("the native core's result is closed or has no columns");
            }
            return ArrowColumn.ordered(NativeCore.columns(handle));
        }

        /** Frees the result; once (a second close does nothing). */
        @Override
        public void close() {
            if (handle != 0 && !closed) {
                release(handle);
            }
            closed = true;
        }
    }

    /** The shim and the core's build for this CPU, copied out of the jar into a new temporary folder. */
    private static Path unpacked() throws IOException {
        Path folder = Files.createTempDirectory("dspark-vllm-native-");
        for (String name : new String[] {SHIM, coreName()}) {
            try (InputStream in = NativeCore.class.getResourceAsStream(RESOURCES + name)) {
                if (in == null) {
                    remove(folder);
                    throw new IOException(
                            "this jar carries no " + name + " for " + System.getProperty("os.name") + "/"
                                    + System.getProperty("os.arch") + " (it is built for linux x86-64)");
                }
                Files.copy(in, folder.resolve(name), StandardCopyOption.REPLACE_EXISTING);
            }
        }
        return folder;
    }

    private static void remove(Path folder) {
        try (java.util.stream.Stream<Path> files = Files.list(folder)) {
            for (Path f : (Iterable<Path>) files::iterator) {
                Files.deleteIfExists(f);
            }
            Files.deleteIfExists(folder);
        } catch (IOException e) {
            // a temporary folder the system cleans up
        }
    }

    /** The build of the core for this CPU: Haswell-class (AVX2, BMI, PCLMUL, LZCNT) or any x86-64. */
    public static String coreName() {
        Set<String> flags = new HashSet<>();
        try {
            for (String line : Files.readAllLines(Paths.get("/proc/cpuinfo"))) {
                if (line.startsWith("flags")) {
                    flags.addAll(Arrays.asList(line.substring(line.indexOf(':') + 1).trim().split("\\s+")));
                    break;
                }
            }
        } catch (IOException e) {
            // no /proc: the baseline build
        }
        boolean haswell =
                flags.containsAll(Arrays.asList("avx2", "bmi1", "bmi2", "pclmulqdq"))
                        && (flags.contains("lzcnt") || flags.contains("abm"));
        return haswell ? "libdspark-haswell.so" : "libdspark-x86-64.so";
    }

    private static native String load(String path);

    private static native long parse(byte[] plan, byte[][] bodies, int from, int to, byte[] error);

    private static native byte[] columns(long handle);

    private static native void release(long handle);
}
