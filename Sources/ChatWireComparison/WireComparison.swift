import ChatProtocol

/// Builds, for the operations our frames carry, the bytes that SOAP 1.1, SOAP 1.2, JSON over
/// HTTP and IRC would put on the wire, so the size table in docs/PROTOCOL.md is measured
/// rather than typed in. Used by `chat-wire sizes` and its tests; servers do not need it.
///
/// Every rival is built as small as it honestly gets: SOAP requests carry only the headers a
/// SOAP endpoint requires (Host, Content-Type, Content-Length and, for 1.1, SOAPAction) and
/// an envelope without whitespace, as .NET clients send it; responses carry only
/// Content-Type and Content-Length; no rival carries a session token, although a stateless
/// web service would need one.
public enum WireComparison {
    /// One operation measured every way.
    public struct Operation: Sendable {
        /// What the operation does, e.g. `"hello" to a room`.
        public var name: String
        /// Whether the client sends it (true) or receives it (false).
        public var clientToServer: Bool
        /// Our frame(s) for it.
        public var frame: Frame
        /// The SOAP 1.1 HTTP request (client → server) or response (server → client).
        public var soap11: String
        /// The SOAP 1.2 HTTP request or response.
        public var soap12: String
        /// The JSON-over-HTTP request or response.
        public var jsonHTTP: String
        /// The IRC line(s), with their CRLF endings.
        public var irc: String

        /// Bytes our frame takes on the wire.
        public var frameByteCount: Int { FrameEncoder.encode(frame).count }

        /// Bytes of our frame that are neither user text nor names: length prefix, type byte,
        /// string lengths, and, in deliveries, the server's sequence numbers and times.
        public var frameOverhead: Int { frameByteCount - WireComparison.contentByteCount(of: frame) }
    }

    /// The time stamped on every delivery in the comparison: 2026-01-01T00:00:00Z.
    public static let sampleTime: UInt64 = 1_767_225_600_000

    /// A 100-byte ASCII message.
    public static let hundredByteText =
        "The quick brown fox jumps over the lazy dog while the chat server counts every byte it sends. 012345"

    /// The representative operations of the issue, in table order.
    public static func representativeOperations() -> [Operation] {
        [
            say(room: "general", text: "hello", name: "\"hello\" to a room"),
            say(room: "general", text: hundredByteText, name: "100-byte message to a room"),
            directMessage(),
            join(),
            presenceEvent(),
            historyReplay(count: 50),
        ]
    }

    /// Sums the bytes of user text and names a frame carries: what any protocol must send.
    public static func contentByteCount(of frame: Frame) -> Int {
        func bytes(_ strings: String?...) -> Int { strings.reduce(0) { $0 + ($1?.utf8.count ?? 0) } }
        switch frame {
        case let .hello(_, nick, password): return bytes(nick, password)
        case let .changeNick(nick), let .nickAccepted(nick): return bytes(nick)
        case let .join(room), let .part(room), let .who(room): return bytes(room)
        case let .say(room, text), let .emote(room, text), let .setTopic(room, text): return bytes(room, text)
        case let .tell(recipient, text): return bytes(recipient, text)
        case .listRooms, .ping, .pong, .limits: return 0
        case let .requestHistory(room, _), let .fetchHistory(room, _, _, _), let .roomState(room, _, _, _):
            return bytes(room)
        case let .setAway(text): return bytes(text)
        case let .register(password), let .dropAccount(password): return bytes(password)
        case let .login(account, password): return bytes(account, password)
        case let .changePassword(old, new): return bytes(old, new)
        case let .registered(account), let .loggedIn(account), let .passwordChanged(account), let .accountDropped(account):
            return bytes(account)
        case let .away(nick, text): return bytes(nick, text)
        case let .kick(room, nick, reason): return bytes(room, nick, reason)
        case let .setMode(room, _, _, argument): return bytes(room, argument)
        case let .invite(room, nick), let .invited(room, nick, _): return bytes(room, nick)
        case let .listBans(room): return bytes(room)
        case let .serverBan(_, mask, reason): return bytes(mask, reason)
        case let .kill(nick, reason): return bytes(nick, reason)
        case let .joinWithKey(room, key): return bytes(room, key)
        case let .kicked(room, _, _, nick, by, reason): return bytes(room, nick, by, reason)
        case let .modeChanged(room, _, _, by, _, _, argument): return bytes(room, by, argument)
        case let .roomModes(room, modes):
            return (modes.ops + modes.voices).reduce(bytes(room, modes.founder, modes.key)) { $0 + bytes($1) }
        case let .banList(room, entries):
            return entries.reduce(bytes(room)) { $0 + bytes($1.mask, $1.setBy, $1.reason) }
        case let .done(_, text): return bytes(text)
        case let .welcome(_, nick, _, motd): return bytes(nick, motd)
        case let .message(room, _, _, sender, text), let .action(room, _, _, sender, text):
            return bytes(room, sender, text)
        case let .direct(sender, recipient, _, text): return bytes(sender, recipient, text)
        case let .joined(room, _, _, nick), let .left(room, _, _, nick): return bytes(room, nick)
        case let .quit(room, _, _, nick, reason): return bytes(room, nick, reason)
        case let .nickChanged(room, _, _, old, new): return bytes(room, old, new)
        case let .roomList(rooms), let .roomListPage(_, rooms): return rooms.reduce(0) { $0 + bytes($1.name, $1.topic) }
        case let .members(room, nicks), let .membersPage(room, _, nicks): return nicks.reduce(bytes(room)) { $0 + bytes($1) }
        case let .topic(room, _, _, setBy, text): return bytes(room, setBy, text)
        case let .history(room, entries), let .historyPage(room, _, _, entries):
            return entries.reduce(bytes(room)) { $0 + bytes($1.sender, $1.text) }
        case let .error(_, _, _, reason), let .goodbye(reason): return bytes(reason)
        case let .unknown(_, payload): return payload.count
        }
    }

    // MARK: The operations

    static func say(room: String, text: String, name: String) -> Operation {
        let parameters: [XML] = [.leaf("room", room), .leaf("text", text)]
        return Operation(
            name: name, clientToServer: true, frame: .say(room: room, text: text),
            soap11: soap11Request(action: "SendMessage", parameters: parameters),
            soap12: soap12Request(action: "SendMessage", parameters: parameters),
            jsonHTTP: jsonRequest(path: "/api/messages", body: .object([("room", .string(room)), ("text", .string(text))])),
            irc: "PRIVMSG #\(room) :\(text)\r\n")
    }

    static func directMessage() -> Operation {
        let (recipient, text) = ("alice", "are you still there?")
        let parameters: [XML] = [.leaf("to", recipient), .leaf("text", text)]
        return Operation(
            name: "direct message", clientToServer: true, frame: .tell(recipient: recipient, text: text),
            soap11: soap11Request(action: "SendDirectMessage", parameters: parameters),
            soap12: soap12Request(action: "SendDirectMessage", parameters: parameters),
            jsonHTTP: jsonRequest(path: "/api/direct", body: .object([("to", .string(recipient)), ("text", .string(text))])),
            irc: "PRIVMSG \(recipient) :\(text)\r\n")
    }

    static func join() -> Operation {
        let parameters: [XML] = [.leaf("room", "general")]
        return Operation(
            name: "join a room", clientToServer: true, frame: .join(room: "general"),
            soap11: soap11Request(action: "JoinRoom", parameters: parameters),
            soap12: soap12Request(action: "JoinRoom", parameters: parameters),
            jsonHTTP: jsonRequest(path: "/api/rooms/join", body: .object([("room", .string("general"))])),
            irc: "JOIN #general\r\n")
    }

    static func presenceEvent() -> Operation {
        let (seq, nick) = (UInt64(42), "bob")
        let event: [XML] = [
            .node("ChatEvent", [
                .leaf("Kind", "joined"), .leaf("Room", "general"), .leaf("Seq", "\(seq)"),
                .leaf("Time", "\(sampleTime)"), .leaf("Nick", nick),
            ])
        ]
        let json = JSON.object([
            ("events", .array([
                .object([
                    ("kind", .string("joined")), ("room", .string("general")), ("seq", .number(seq)),
                    ("time", .number(sampleTime)), ("nick", .string(nick)),
                ])
            ]))
        ])
        return Operation(
            name: "presence event (joined)", clientToServer: false,
            frame: .joined(room: "general", seq: seq, time: sampleTime, nick: nick),
            soap11: soap11Response(action: "Poll", result: event),
            soap12: soap12Response(action: "Poll", result: event),
            jsonHTTP: jsonResponse(body: json),
            irc: ":\(nick)!~\(nick)@localhost JOIN #general\r\n")
    }

    static func historyReplay(count: Int) -> Operation {
        let senders = ["alice", "bob", "carol", "dave"]
        let entries = (0..<count).map { index in
            HistoryEntry(
                kind: .message, seq: 101 + UInt64(index), time: sampleTime + UInt64(index) * 1_500,
                sender: senders[index % senders.count],
                text: "message \(index + 1) of the history" + String(repeating: "!", count: index % 7))
        }
        let xml = entries.map { entry in
            XML.node("ChatMessage", [
                .leaf("Seq", "\(entry.seq)"), .leaf("Time", "\(entry.time)"),
                .leaf("Sender", entry.sender), .leaf("Text", entry.text),
            ])
        }
        let json = JSON.object([
            ("room", .string("general")),
            ("messages", .array(entries.map { entry in
                .object([
                    ("seq", .number(entry.seq)), ("time", .number(entry.time)),
                    ("sender", .string(entry.sender)), ("text", .string(entry.text)),
                ])
            })),
        ])
        let irc = entries.map { ":\($0.sender)!~\($0.sender)@localhost PRIVMSG #general :\($0.text)\r\n" }
        return Operation(
            name: "history replay, \(count) messages", clientToServer: false,
            frame: .history(room: "general", entries: entries),
            soap11: soap11Response(action: "GetHistory", result: xml),
            soap12: soap12Response(action: "GetHistory", result: xml),
            jsonHTTP: jsonResponse(body: json),
            irc: irc.joined())
    }

    // MARK: SOAP, ASMX style

    private static let xmlDeclaration = "<?xml version=\"1.0\" encoding=\"utf-8\"?>"
    private static let schemaNamespaces =
        "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\""
    private static let serviceNamespace = "http://tempuri.org/"

    /// The SOAP 1.1 request an ASMX client sends to call `action` with `parameters`.
    public static func soap11Request(action: String, parameters: [XML]) -> String {
        let body = soap11Envelope(.node(action, parameters, namespace: serviceNamespace))
        return httpRequest(
            path: "/ChatService.asmx", contentType: "text/xml; charset=utf-8",
            extraHeaders: [("SOAPAction", "\"\(serviceNamespace)\(action)\"")], body: body)
    }

    /// The SOAP 1.2 request an ASMX client sends to call `action` with `parameters`.
    public static func soap12Request(action: String, parameters: [XML]) -> String {
        let body = soap12Envelope(.node(action, parameters, namespace: serviceNamespace))
        return httpRequest(
            path: "/ChatService.asmx",
            contentType: "application/soap+xml; charset=utf-8; action=\"\(serviceNamespace)\(action)\"", body: body)
    }

    /// The SOAP 1.1 response an ASMX service returns from `action` with `result` inside.
    public static func soap11Response(action: String, result: [XML]) -> String {
        httpResponse(contentType: "text/xml; charset=utf-8", body: soap11Envelope(responseElement(action, result)))
    }

    /// The SOAP 1.2 response an ASMX service returns from `action` with `result` inside.
    public static func soap12Response(action: String, result: [XML]) -> String {
        httpResponse(contentType: "application/soap+xml; charset=utf-8", body: soap12Envelope(responseElement(action, result)))
    }

    private static func responseElement(_ action: String, _ result: [XML]) -> XML {
        .node("\(action)Response", [.node("\(action)Result", result)], namespace: serviceNamespace)
    }

    private static func soap11Envelope(_ content: XML) -> String {
        xmlDeclaration + "<soap:Envelope \(schemaNamespaces) xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\">"
            + "<soap:Body>\(content.rendered)</soap:Body></soap:Envelope>"
    }

    private static func soap12Envelope(_ content: XML) -> String {
        xmlDeclaration + "<soap12:Envelope \(schemaNamespaces) xmlns:soap12=\"http://www.w3.org/2003/05/soap-envelope\">"
            + "<soap12:Body>\(content.rendered)</soap12:Body></soap12:Envelope>"
    }

    // MARK: JSON over HTTP

    /// A JSON POST to `path`.
    public static func jsonRequest(path: String, body: JSON) -> String {
        httpRequest(path: path, contentType: "application/json", body: body.rendered)
    }

    /// A 200 response carrying `body` as JSON.
    public static func jsonResponse(body: JSON) -> String {
        httpResponse(contentType: "application/json", body: body.rendered)
    }

    // MARK: HTTP

    /// An HTTP/1.1 POST with Host, Content-Type, a Content-Length counted in bytes, then
    /// `extraHeaders`: the order of the ASMX service help page.
    public static func httpRequest(
        path: String, contentType: String, extraHeaders: [(String, String)] = [], body: String
    ) -> String {
        var head = "POST \(path) HTTP/1.1\r\nHost: localhost\r\nContent-Type: \(contentType)\r\n"
        head += "Content-Length: \(body.utf8.count)\r\n"
        for (name, value) in extraHeaders { head += "\(name): \(value)\r\n" }
        return head + "\r\n" + body
    }

    /// An HTTP/1.1 200 response with Content-Type and a Content-Length counted in bytes.
    public static func httpResponse(contentType: String, body: String) -> String {
        "HTTP/1.1 200 OK\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body
    }

    // MARK: Just enough XML and JSON

    /// An XML element: text content or child elements.
    public indirect enum XML: Sendable {
        /// `<name>text</name>`, the text escaped.
        case leaf(String, String)
        /// `<name xmlns="namespace">children</name>`; no xmlns attribute when `namespace` is nil.
        case node(String, [XML], namespace: String? = nil)

        /// The element as compact XML.
        public var rendered: String {
            switch self {
            case let .leaf(name, text):
                return "<\(name)>\(XML.escaped(text))</\(name)>"
            case let .node(name, children, namespace):
                let attribute = namespace.map { " xmlns=\"\($0)\"" } ?? ""
                return "<\(name)\(attribute)>" + children.map(\.rendered).joined() + "</\(name)>"
            }
        }

        static func escaped(_ text: String) -> String {
            var out = ""
            for character in text {
                switch character {
                case "&": out += "&amp;"
                case "<": out += "&lt;"
                case ">": out += "&gt;"
                default: out.append(character)
                }
            }
            return out
        }
    }

    /// A JSON value: string, unsigned number, array or object (keys kept in order).
    public indirect enum JSON: Sendable {
        /// A string, escaped when rendered.
        case string(String)
        /// A non-negative integer.
        case number(UInt64)
        /// An array.
        case array([JSON])
        /// An object whose keys render in the given order.
        case object([(String, JSON)])

        /// The value as compact JSON.
        public var rendered: String {
            switch self {
            case let .string(text): return JSON.quoted(text)
            case let .number(value): return "\(value)"
            case let .array(values): return "[" + values.map(\.rendered).joined(separator: ",") + "]"
            case let .object(members):
                return "{" + members.map { JSON.quoted($0.0) + ":" + $0.1.rendered }.joined(separator: ",") + "}"
            }
        }

        static func quoted(_ text: String) -> String {
            var out = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case _ where scalar.value < 0x20:
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }
    }
}
