package io.dspark.vllm.request;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.KeyManager;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedTrustManager;

/**
 * The TLS context of a table's client (as discovery's: connector.server.transport.tls_context):
 * 'request.tls-ca-bundle' (PEM, one or more certificates) is the only trust when given, else the JDK's default trust store; with
 * 'request.tls-verify' = 'false' nothing is checked, not even the host name. That is done with a trust manager
 * of our own that extends {@link X509ExtendedTrustManager}: the JDK checks the host name inside the trust
 * manager's engine-aware methods, so one that accepts everything skips it for this client only, and the
 * JVM-wide {@code jdk.internal.httpclient.disableHostnameVerification} is never set. A client certificate
 * ('request.tls-client-cert', PEM) goes with its key: PKCS#8 ({@code BEGIN PRIVATE KEY}) or PKCS#1
 * ({@code BEGIN RSA PRIVATE KEY}), in the certificate file or in 'request.tls-client-key'.
 */
final class Tls {
    private Tls() {}

    private static final Pattern PEM =
            Pattern.compile("-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \\1-----", Pattern.DOTALL);
    private static final char[] NO_PASSWORD = new char[0];

    static SSLContext context(RequestSpec spec) {
        TrustManager[] trust = spec.tlsVerify ? trustManagers(spec.tlsCaBundle) : new TrustManager[] {new TrustAll()};
        KeyManager[] keys = spec.tlsClientCert == null ? null : keyManagers(spec.tlsClientCert, spec.tlsClientKey);
        try {
            SSLContext context = SSLContext.getInstance("TLS");
            context.init(keys, trust, null);
            return context;
        } catch (GeneralSecurityException e) {
            throw new IllegalArgumentException("dspark-vllm: cannot set up TLS: " + Failure.detail(e), e);
        }
    }

    private static TrustManager[] trustManagers(String caBundle) {
        try {
            TrustManagerFactory factory = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            if (caBundle == null) {
                factory.init((KeyStore) null);
                return factory.getTrustManagers();
            }
            List<X509Certificate> certificates = certificates(read(caBundle), caBundle);
            if (certificates.isEmpty()) {
                throw new IOException("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
            }
            KeyStore store = KeyStore.getInstance("PKCS12");
            store.load(null, null);
            for (int i = 0; i < certificates.size(); i++) {
                store.setCertificateEntry("ca-" + i, certificates.get(i));
            }
            factory.init(store);
            return factory.getTrustManagers();
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalArgumentException("dspark-vllm: cannot load 'request.tls-ca-bundle' = '" + caBundle
                    + "': " + Failure.detail(e) + ". Give a readable PEM file (on every TaskManager) of the CA "
                    + "certificates that signed the server's certificate", e);
        }
    }

    private static KeyManager[] keyManagers(String certFile, String keyFile) {
        String option = "'request.tls-client-cert' = '" + certFile + "'";
        try {
            String certPem = read(certFile);
            List<X509Certificate> chain = certificates(certPem, certFile);
            if (chain.isEmpty()) {
                throw new IOException("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
            }
            if (keyFile != null) {
                option = "'request.tls-client-key' = '" + keyFile + "'";
            }
            PrivateKey key = privateKey(keyFile == null ? certPem : read(keyFile));
            KeyStore store = KeyStore.getInstance("PKCS12");
            store.load(null, null);
            store.setKeyEntry("client", key, NO_PASSWORD, chain.toArray(new Certificate[0]));
            KeyManagerFactory factory = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            factory.init(store, NO_PASSWORD);
            return factory.getKeyManagers();
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalArgumentException("dspark-vllm: cannot load " + option + ": " + Failure.detail(e)
                    + ". Give a readable PEM certificate (on every TaskManager) and its unencrypted private key "
                    + "(PKCS#8 'BEGIN PRIVATE KEY' or 'BEGIN RSA PRIVATE KEY'; `openssl pkcs8 -topk8 -nocrypt` "
                    + "converts others) in 'request.tls-client-key' unless the certificate file holds it", e);
        }
    }

    private static String read(String file) throws IOException {
        return Files.readString(Path.of(file), StandardCharsets.US_ASCII);
    }

    private static List<X509Certificate> certificates(String pem, String file)
            throws IOException, GeneralSecurityException {
        CertificateFactory factory = CertificateFactory.getInstance("X.509");
        List<X509Certificate> out = new ArrayList<>();
        Matcher m = PEM.matcher(pem);
        while (m.find()) {
            if (m.group(1).equals("CERTIFICATE") || m.group(1).equals("TRUSTED CERTIFICATE")) {
                byte[] der = base64(m.group(2));
                out.add((X509Certificate) factory.generateCertificate(new ByteArrayInputStream(der)));
            }
        }
        return out;
    }

    private static PrivateKey privateKey(String pem) throws IOException, GeneralSecurityException {
        Matcher m = PEM.matcher(pem);
        while (m.find()) {
            String type = m.group(1);
            if (type.equals("PRIVATE KEY")) {
                return pkcs8(base64(m.group(2)));
            }
            if (type.equals("RSA PRIVATE KEY")) {
                if (m.group(2).contains(":")) {
                    throw new IOException("the RSA private key is encrypted");
                }
                return KeyFactory.getInstance("RSA").generatePrivate(new PKCS8EncodedKeySpec(rsaPkcs8(base64(
                        m.group(2)))));
            }
            if (type.equals("ENCRYPTED PRIVATE KEY")) {
                throw new IOException("the private key is encrypted");
            }
            if (type.endsWith("PRIVATE KEY")) {
                throw new IOException("a '" + type + "' is not read, only PKCS#8 or PKCS#1 RSA");
            }
        }
        throw new IOException("no private key found (-----BEGIN PRIVATE KEY-----)");
    }

    private static PrivateKey pkcs8(byte[] der) throws GeneralSecurityException {
        GeneralSecurityException last = null;
        for (String algorithm : new String[] {"RSA", "EC", "Ed25519", "Ed448", "RSASSA-PSS", "DSA"}) {
            try {
                return KeyFactory.getInstance(algorithm).generatePrivate(new PKCS8EncodedKeySpec(der));
            } catch (GeneralSecurityException e) {
                last = e;
            }
        }
        throw last;
    }

    /** PKCS#1 RSAPrivateKey wrapped in a PKCS#8 PrivateKeyInfo. */
    private static byte[] rsaPkcs8(byte[] pkcs1) {
        byte[] algorithm = {0x30, 0x0d, 0x06, 0x09, 0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 0x01,
            0x01, 0x01, 0x05, 0x00};
        byte[] version = {0x02, 0x01, 0x00};
        byte[] octets = der(0x04, pkcs1);
        byte[] inner = new byte[version.length + algorithm.length + octets.length];
        System.arraycopy(version, 0, inner, 0, version.length);
        System.arraycopy(algorithm, 0, inner, version.length, algorithm.length);
        System.arraycopy(octets, 0, inner, version.length + algorithm.length, octets.length);
        return der(0x30, inner);
    }

    private static byte[] der(int tag, byte[] content) {
        int n = content.length;
        byte[] length;
        if (n < 0x80) {
            length = new byte[] {(byte) n};
        } else if (n < 0x100) {
            length = new byte[] {(byte) 0x81, (byte) n};
        } else if (n < 0x10000) {
            length = new byte[] {(byte) 0x82, (byte) (n >> 8), (byte) n};
        } else {
            length = new byte[] {(byte) 0x83, (byte) (n >> 16), (byte) (n >> 8), (byte) n};
        }
        byte[] out = new byte[1 + length.length + n];
        out[0] = (byte) tag;
        System.arraycopy(length, 0, out, 1, length.length);
        System.arraycopy(content, 0, out, 1 + length.length, n);
        return out;
    }

    private static byte[] base64(String body) throws IOException {
        try {
            return Base64.getMimeDecoder().decode(body.strip());
        } catch (IllegalArgumentException e) {
            throw new IOException("a PEM block is not valid base64");
        }
    }

    /** 'request.tls-verify' = 'false': every certificate, any host name (for this client only). */
    static final class TrustAll extends X509ExtendedTrustManager {
        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType) {}

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType) {}

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, Socket socket) {}

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, Socket socket) {}

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine) {}

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine) {}

        @Override
        public X509Certificate[] getAcceptedIssuers() {
            return new X509Certificate[0];
        }
    }
}
