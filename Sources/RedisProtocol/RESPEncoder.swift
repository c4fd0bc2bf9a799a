/// Writes RESP: commands as Redis expects them from a client (an array of bulk strings), and any
/// value in its wire form.
public enum RESPEncoder {
    /// Appends a command — its name and arguments, each binary-safe — as an array of bulk strings.
    public static func encodeCommand(_ arguments: [[UInt8]], into out: inout [UInt8]) {
        header(UInt8(ascii: "*"), arguments.count, into: &out)
        for argument in arguments { bulk(argument, into: &out) }
    }

    /// A command whose name and arguments are text, as bytes to send.
    public static func command(_ arguments: String...) -> [UInt8] {
        var out: [UInt8] = []
        encodeCommand(arguments.map { Array($0.utf8) }, into: &out)
        return out
    }

    /// Appends `value` in its wire form. A simple string or an error must not contain CR or LF.
    public static func encode(_ value: RESPValue, into out: inout [UInt8]) {
        switch value {
        case .simpleString(let text):
            line(UInt8(ascii: "+"), text, into: &out)
        case .error(let text):
            line(UInt8(ascii: "-"), text, into: &out)
        case .integer(let number):
            line(UInt8(ascii: ":"), String(number), into: &out)
        case .bulkString(nil):
            header(UInt8(ascii: "$"), -1, into: &out)
        case .bulkString(let bytes?):
            bulk(bytes, into: &out)
        case .array(nil):
            header(UInt8(ascii: "*"), -1, into: &out)
        case .array(let elements?):
            header(UInt8(ascii: "*"), elements.count, into: &out)
            for element in elements { encode(element, into: &out) }
        }
    }

    private static func line(_ type: UInt8, _ text: String, into out: inout [UInt8]) {
        precondition(!text.utf8.contains(UInt8(ascii: "\r")) && !text.utf8.contains(UInt8(ascii: "\n")),
            "a RESP line cannot hold CR or LF")
        out.append(type)
        out.append(contentsOf: text.utf8)
        out.append(contentsOf: [UInt8(ascii: "\r"), UInt8(ascii: "\n")])
    }

    private static func header(_ type: UInt8, _ count: Int, into out: inout [UInt8]) {
        line(type, String(count), into: &out)
    }

    private static func bulk(_ bytes: [UInt8], into out: inout [UInt8]) {
        header(UInt8(ascii: "$"), bytes.count, into: &out)
        out.append(contentsOf: bytes)
        out.append(contentsOf: [UInt8(ascii: "\r"), UInt8(ascii: "\n")])
    }
}
