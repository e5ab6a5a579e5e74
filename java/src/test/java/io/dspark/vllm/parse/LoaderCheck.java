package io.dspark.vllm.parse;

import java.net.URL;
import java.net.URLClassLoader;

/**
 * The core loads in every classloader of one JVM (Flink gives each job its own): NativeCore loaded by N fresh
 * classloaders, each asked available(); prints one line per loader ("null" when it loaded, else why not).
 * Run with -Ddspark.native.dir (as java_tests does) and without.
 */
public final class LoaderCheck {
    public static void main(String[] args) throws Exception {
        URL classes = NativeCore.class.getProtectionDomain().getCodeSource().getLocation();
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 3;
        for (int i = 0; i < n; i++) {
            URLClassLoader loader = new URLClassLoader(new URL[] {classes}, ClassLoader.getPlatformClassLoader());
            Class<?> core = Class.forName("io.dspark.vllm.parse.NativeCore", true, loader);
            Object why = core.getMethod("available").invoke(null);
            System.out.println("loader " + i + ": " + why);
        }
    }
}
