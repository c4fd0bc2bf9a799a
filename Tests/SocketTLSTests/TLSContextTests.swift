import Glibc
import Testing
@testable import SocketTLS

/// Loading certificates, keys and CA files: every way a file can be wrong has its own message, and
/// a new context made from changed files (a reload) leaves running sessions alone.
@Suite("TLS configuration files")
struct TLSContextTests {
    private func serverError(certificate: String, key: String) -> TLSError? {
        #expect(throws: TLSError.self) { try TLSContext(.server(certificateChainFile: certificate, privateKeyFile: key)) }
    }

    @Test func goodFilesLoadWithTheCertificateDescribedAndNoWarnings() throws {
        let fixture = TLSFixture()
        let context = try fixture.serverContext()
        #expect(context.warnings == [])
        let certificate = try #require(context.certificate)
        #expect(certificate.subject == "CN=localhost")
        #expect(certificate.issuer == "CN=SocketTLS Test CA")
        #expect(certificate.names == ["localhost", "127.0.0.1", "::1"])
        #expect(certificate.description.hasPrefix("CN=localhost (localhost, 127.0.0.1, ::1), valid until 20"), "\(certificate)")
    }

    @Test func missingCertificateFileIsNamedWithTheErrno() throws {
        let fixture = TLSFixture()
        let error = serverError(certificate: fixture.pki.path("nope.pem"), key: fixture.server.keyFile)
        #expect(error?.kind == .unreadableFile)
        #expect(error?.description == "load certificate chain from \(fixture.pki.path("nope.pem")) failed: No such file or directory (errno 2): there is no such file; check the path (Scripts/dev-cert.sh makes a certificate chain for testing)")
    }

    @Test func missingKeyFileIsNamed() throws {
        let fixture = TLSFixture()
        let error = serverError(certificate: fixture.server.certificateFile, key: fixture.pki.path("nokey.pem"))
        #expect(error?.kind == .unreadableFile)
        #expect(error?.operation == "load private key from")
    }

    @Test func directoryInsteadOfAFileIsNamed() throws {
        let fixture = TLSFixture()
        let error = serverError(certificate: fixture.pki.directory, key: fixture.server.keyFile)
        #expect(error?.kind == .unreadableFile)
        #expect(error?.reason.contains("it is a directory") == true, "\(String(describing: error))")
    }

    // Root reads every file regardless of its mode, so this runs only as another user.
    @Test(.enabled(if: getuid() != 0, "root may read any file"))
    func unreadableFileSaysToCheckPermissions() throws {
        let fixture = TLSFixture()
        chmod(fixture.server.keyFile, 0)
        let error = serverError(certificate: fixture.server.certificateFile, key: fixture.server.keyFile)
        #expect(error?.kind == .unreadableFile)
        #expect(error?.reason.contains("check the file's owner and permissions") == true)
    }

    @Test func emptyCertificateFileIsNamed() throws {
        let fixture = TLSFixture()
        let empty = fixture.pki.write("empty.pem", "\n")
        let error = serverError(certificate: empty, key: fixture.server.keyFile)
        #expect(error?.kind == .invalidCertificateFile)
        #expect(error?.reason == "the file is empty; it should hold the certificate chain in PEM form")
    }

    @Test func derCertificateFileIsNamedWithTheConversion() throws {
        let fixture = TLSFixture()
        let der = fixture.pki.write("server.der", String(decoding: [0x30, 0x82, 0x01, 0x0A, 0x02, 0x01], as: UTF8.self))
        let error = serverError(certificate: der, key: fixture.server.keyFile)
        #expect(error?.kind == .invalidCertificateFile)
        #expect(error?.reason.contains("openssl x509 -inform DER") == true, "\(String(describing: error))")
    }

    @Test func swappedCertificateAndKeyAreNamedAsSwapped() throws {
        let fixture = TLSFixture()
        let error = serverError(certificate: fixture.server.keyFile, key: fixture.server.certificateFile)
        #expect(error?.kind == .invalidCertificateFile)
        #expect(error?.reason == "the file holds a private key, not a certificate; are the certificate and key files swapped?")

        let keyError = serverError(certificate: fixture.server.certificateFile, key: fixture.server.certificateFile)
        #expect(keyError?.kind == .invalidPrivateKeyFile)
        #expect(keyError?.reason == "the file holds a certificate, not a private key; are the certificate and key files swapped?")
    }

    @Test func keyOfAnotherCertificateIsAMismatch() throws {
        let fixture = TLSFixture()
        let other = fixture.pki.serverCertificate("other", issuedBy: fixture.ca)
        let error = serverError(certificate: fixture.server.certificateFile, key: other.keyFile)
        #expect(error?.kind == .keyMismatch)
        #expect(error?.reason.hasPrefix("this key does not belong to the certificate in \(fixture.server.certificateFile)") == true, "\(String(describing: error))")
    }

    @Test func passphraseProtectedKeyIsRefusedWithoutPrompting() throws {
        let fixture = TLSFixture()
        let encrypted = fixture.pki.encryptedKeyFile("encrypted-key.pem", for: fixture.server, passphrase: "hunter2")
        let error = serverError(certificate: fixture.server.certificateFile, key: encrypted)
        #expect(error?.kind == .encryptedPrivateKey)
        #expect(error?.reason.contains("openssl pkey -in \(encrypted) -out KEY.pem") == true, "\(String(describing: error))")
    }

    @Test func caFileWithoutCertificatesIsRefused() throws {
        let fixture = TLSFixture()
        let notCA = fixture.pki.write("not-ca.pem", "-----BEGIN NOTHING-----\nAAAA\n-----END NOTHING-----\n")
        let error = #expect(throws: TLSError.self) { try TLSContext(.client(trust: .certificateAuthorities(file: notCA))) }
        #expect(error?.kind == .invalidCAFile)
        #expect(error?.description.hasPrefix("load CA certificates from \(notCA) failed: the file holds no readable PEM certificate") == true, "\(String(describing: error))")

        let missing = #expect(throws: TLSError.self) { try TLSContext(.client(trust: .certificateAuthorities(file: fixture.pki.path("no-ca.pem")))) }
        #expect(missing?.kind == .unreadableFile)
    }

    @Test func systemTrustStoreLoads() throws {
        let context = try TLSContext(.client())
        #expect(context.warnings.isEmpty)
    }

    @Test func certificateNearItsEndOrWithoutNamesOrWithAnOpenKeyIsWarnedAbout() throws {
        let fixture = TLSFixture()
        let soon = fixture.pki.serverCertificate("soon", issuedBy: fixture.ca, validFor: 10 * 86_400)
        let soonWarnings = try fixture.serverContext(soon).warnings
        #expect(soonWarnings.count == 1 && soonWarnings[0].contains("expires at") && soonWarnings[0].contains("renew it"), "\(soonWarnings)")

        let expired = fixture.pki.serverCertificate("old", issuedBy: fixture.ca, validFrom: -10 * 86_400, validFor: 86_400)
        let expiredWarnings = try fixture.serverContext(expired).warnings
        #expect(expiredWarnings.count == 1 && expiredWarnings[0].contains("every client will refuse it"), "\(expiredWarnings)")

        let nameless = fixture.pki.serverCertificate("nameless", names: [], issuedBy: fixture.ca)
        #expect(try fixture.serverContext(nameless).warnings.contains { $0.contains("has no subjectAltName") })

        chmod(fixture.server.keyFile, 0o644)
        let openWarnings = try fixture.serverContext().warnings
        #expect(openWarnings == ["the private key \(fixture.server.keyFile) may be read by other users (mode 644); `chmod 600 \(fixture.server.keyFile)`"])
    }

    @Test func reloadedContextServesNewConnectionsWhileOldSessionsCarryOn() throws {
        let fixture = TLSFixture()
        let chain = fixture.pki.path("live.pem")
        let key = fixture.pki.path("live-key.pem")
        func install(_ identity: TestPKI.Identity) {
            fixture.pki.write("live.pem", fixture.pki.read(identity.certificateFile))
            fixture.pki.write("live-key.pem", fixture.pki.read(identity.keyFile))
        }
        let configuration = TLSConfiguration.server(certificateChainFile: chain, privateKeyFile: key)
        install(fixture.server)
        let before = try TLSContext(configuration)
        let old = try fixture.pair(server: before)
        old.send(Array("before".utf8), from: old.client)
        old.pump()
        #expect(old.server.received == Array("before".utf8))

        // The operator renews the certificate and sends SIGHUP: the server makes a new context.
        let renewed = fixture.pki.serverCertificate("renewed", commonName: "renewed.localhost", issuedBy: fixture.ca)
        install(renewed)
        let after = try TLSContext(configuration)
        #expect(after.certificate?.subject == "CN=renewed.localhost")

        let new = try fixture.pair(server: after)
        new.send(Array("new".utf8), from: new.client)
        new.pump()
        #expect(new.server.received == Array("new".utf8))
        #expect(new.client.session.peerCertificate?.subject == "CN=renewed.localhost")

        // The old connection still works on the old certificate.
        old.send(Array(" and after".utf8), from: old.client)
        old.send(Array("still here".utf8), from: old.server)
        old.pump()
        #expect(old.server.received == Array("before and after".utf8))
        #expect(old.client.received == Array("still here".utf8))
        #expect(old.client.session.peerCertificate?.subject == "CN=localhost")

        // A broken file at the next reload is reported, and the context in use is untouched.
        fixture.pki.write("live-key.pem", fixture.pki.read(fixture.server.keyFile))
        let error = #expect(throws: TLSError.self) { try TLSContext(configuration) }
        #expect(error?.kind == .keyMismatch)
        let still = try fixture.pair(server: after)
        still.pump()
        #expect(still.client.session.isEstablished)
    }
}
