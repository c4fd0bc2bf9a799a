import SocketCore
import Testing

/// `--server HOST:PORT`: what parses, and what the error says when it does not.
@Suite struct ServerAddressTests {
    @Test func parsesNamesIPv4AndBracketedIPv6() throws {
        #expect(try ServerAddress(parsing: "127.0.0.1:7001") == ServerAddress(host: "127.0.0.1", port: 7001))
        #expect(try ServerAddress(parsing: "[::1]:7002") == ServerAddress(host: "::1", port: 7002))
        #expect(try ServerAddress(parsing: "chat.example.org:65535") == ServerAddress(host: "chat.example.org", port: 65535))
        #expect(ServerAddress(host: "::1", port: 7002).description == "[::1]:7002", "IPv6 prints in brackets")
        #expect(ServerAddress(host: "localhost", port: 1).description == "localhost:1")
    }

    @Test func refusesMalformedAddressesSayingWhy() {
        let cases: [(String, ServerAddress.ParseError)] = [
            ("127.0.0.1", .notHostAndPort),
            (":7000", .notHostAndPort),
            ("[::1]", .notHostAndPort),
            ("[::1]7000", .notHostAndPort),
            ("a b:7000", .notHostAndPort),
            ("::1:7000", .unbracketedIPv6),
            ("localhost:", .badPort("")),
            ("localhost:0", .badPort("0")),
            ("localhost:65536", .badPort("65536")),
            ("localhost:+70", .badPort("+70")),
            ("localhost:70x", .badPort("70x")),
            ("[::1]:-1", .badPort("-1")),
        ]
        for (text, expected) in cases {
            #expect(throws: expected, "\(text) is refused as \(expected)") { try ServerAddress(parsing: text) }
        }
        #expect(ServerAddress.ParseError.notHostAndPort.description.contains("[::1]:7000"), "the error shows the right form")
    }
}
