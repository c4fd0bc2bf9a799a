/// The strict subset of TOML the config file is written in, parsed with errors that name the line.
///
/// Ours rather than TOMLKit (which wraps the C++ toml++ and would be the client's only C++
/// dependency) or Yams (YAML, not the TOML users of such clients expect): the file needs
/// `key = value` lines, `[table]` headers, `#` comments, and values that are strings (basic
/// `"…"` with `\" \\ \n \t \uXXXX` escapes, or literal `'…'`), integers, booleans and arrays of
/// those on one line. Anything else — dotted keys, inline tables, dates, a key given twice — is
/// refused with its line number, so a file is never half understood. Decimal numbers (`2.5`) are
/// refused too, unless the caller takes them (`decimals`: the server's timeouts and rates).
///
/// Its own target, without Foundation, because both `chat-client`'s settings and `chat-server
/// --config` are written in it: one grammar, one set of error messages.
public enum ConfigFile {
    /// A value in the file.
    public enum Value: Equatable, Sendable {
        /// `"text"` or `'text'`.
        case string(String)
        /// `42`, `100_000`.
        case integer(Int)
        /// `true` or `false`.
        case boolean(Bool)
        /// `2.5`, `0.25`: only where the caller takes decimals (`parse(_:tables:decimals:)`).
        case decimal(Double)
        /// `[a, b]`, on one line.
        case array([Value])
    }

    /// A key and its value, with the line it was on (from 1) for error messages.
    public struct Entry: Equatable, Sendable {
        /// The table it is in (`""` at the top).
        public let table: String
        /// The key, as written.
        public let key: String
        /// The value.
        public let value: Value
        /// The line it is on, from 1.
        public let line: Int
    }

    /// Why a file was refused: the line (from 1) and what is wrong with it.
    public struct ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        /// The line, from 1.
        public let line: Int
        /// What is wrong with it.
        public let reason: String
        /// `line 3: reason`.
        public var description: String { "line \(line): \(reason)" }

        /// The error `reason` at `line` (from 1): also what a caller's own check of an entry says.
        public init(line: Int, reason: String) {
            self.line = line
            self.reason = reason
        }
    }

    /// Every entry of `text`, in file order; throws at the first line that is not understood.
    /// Given `tables`, a header naming another table is refused at its line, even with no keys
    /// under it (which would otherwise leave no entry to refuse). With `decimals`, `2.5` is a
    /// `.decimal`; without, it is refused as any other word the file does not take.
    public static func parse(_ text: String, tables known: [String]? = nil, decimals: Bool = false) throws(ParseError) -> [Entry] {
        var entries: [Entry] = []
        var table = ""
        var seen: Set<String> = []
        var tables: Set<String> = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let number = index + 1
            var scanner = Scanner(Substring(raw.hasSuffix("\r") ? raw.dropLast() : raw), line: number, decimals: decimals)
            scanner.skipSpace()
            if scanner.atEnd || scanner.peek == "#" { continue }
            if scanner.peek == "[" {
                scanner.advance()
                let name = try scanner.bareKey()
                guard scanner.take("]") else { throw ParseError(line: number, reason: "a table header is [name]") }
                try scanner.expectEnd()
                guard tables.insert(name).inserted else { throw ParseError(line: number, reason: "[\(name)] is given twice") }
                if let known, !known.contains(name) {
                    let listed = known.map { "[\($0)]" }.joined(separator: " and ")
                    throw ParseError(line: number, reason: "unknown table [\(name)] (the file has \(listed))")
                }
                table = name
                continue
            }
            let key = try scanner.bareKey()
            scanner.skipSpace()
            guard scanner.take("=") else { throw ParseError(line: number, reason: "expected `\(key) = value`") }
            scanner.skipSpace()
            let value = try scanner.value()
            try scanner.expectEnd()
            guard seen.insert(table + "." + key).inserted else {
                throw ParseError(line: number, reason: "\(key) is given twice")
            }
            entries.append(Entry(table: table, key: key, value: value, line: number))
        }
        return entries
    }

    /// `value` written as this subset writes it (strings always basic, escaped as needed).
    public static func render(_ value: Value) -> String {
        switch value {
        case .string(let text):
            var out = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\t": out += "\\t"
                default:
                    if scalar.value < 0x20 || scalar.value == 0x7F {
                        out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
                    } else {
                        out.unicodeScalars.append(scalar)
                    }
                }
            }
            return out + "\""
        case .integer(let number): return String(number)
        case .decimal(let number): return String(number)
        case .boolean(let flag): return flag ? "true" : "false"
        case .array(let values): return "[" + values.map(render).joined(separator: ", ") + "]"
        }
    }

    /// Reads one line left to right.
    private struct Scanner {
        private var rest: Substring
        private let line: Int
        private let decimals: Bool

        init(_ text: Substring, line: Int, decimals: Bool) {
            rest = text
            self.line = line
            self.decimals = decimals
        }

        var atEnd: Bool { rest.isEmpty }
        var peek: Character? { rest.first }
        mutating func advance() { rest = rest.dropFirst() }

        mutating func take(_ character: Character) -> Bool {
            guard rest.first == character else { return false }
            rest = rest.dropFirst()
            return true
        }

        mutating func skipSpace() {
            rest = rest.drop { $0 == " " || $0 == "\t" }
        }

        func fail(_ reason: String) -> ParseError { ParseError(line: line, reason: reason) }

        mutating func expectEnd() throws(ParseError) {
            skipSpace()
            guard atEnd || peek == "#" else { throw fail("unexpected \"\(rest)\" after the value") }
        }

        mutating func bareKey() throws(ParseError) -> String {
            let key = rest.prefix { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }
            guard !key.isEmpty else { throw fail("expected a name (letters, digits, _ and -)") }
            rest = rest.dropFirst(key.count)
            return String(key)
        }

        mutating func value() throws(ParseError) -> Value {
            guard let first = peek else { throw fail("a value is missing") }
            switch first {
            case "\"": return .string(try basicString())
            case "'": return .string(try literalString())
            case "[":
                advance()
                var values: [Value] = []
                while true {
                    skipSpace()
                    if take("]") { return .array(values) }
                    values.append(try value())
                    skipSpace()
                    if take(",") { continue }
                    guard take("]") else { throw fail("an array is [a, b, …] on one line") }
                    return .array(values)
                }
            default:
                let word = rest.prefix { !" \t,]#".contains($0) }
                rest = rest.dropFirst(word.count)
                if word == "true" { return .boolean(true) }
                if word == "false" { return .boolean(false) }
                if let number = Int(String(word.filter { $0 != "_" })) { return .integer(number) }
                // Digits, one point, digits: not Double's whole grammar (no exponents, inf or nan).
                if decimals, word.filter({ $0 == "." }).count == 1, word.first != ".", word.last != ".",
                    word.allSatisfy({ $0 == "." || $0 == "-" || $0.isASCII && $0.isNumber }), let number = Double(word)
                {
                    return .decimal(number)
                }
                let number = decimals ? "a number" : "a whole number"
                throw fail("\"\(word)\" is not a value this file takes (a \"string\", \(number), true or false, or [a list])")
            }
        }

        private mutating func literalString() throws(ParseError) -> String {
            advance()
            guard let end = rest.firstIndex(of: "'") else { throw fail("a string is not closed") }
            let text = String(rest[..<end])
            rest = rest[rest.index(after: end)...]
            return text
        }

        private mutating func basicString() throws(ParseError) -> String {
            advance()
            var scalars = String.UnicodeScalarView()
            while let character = peek {
                advance()
                switch character {
                case "\"": return String(scalars)
                case "\\":
                    guard let escaped = peek else { throw fail("a string is not closed") }
                    advance()
                    switch escaped {
                    case "\"": scalars.append("\"")
                    case "\\": scalars.append("\\")
                    case "n": scalars.append("\n")
                    case "t": scalars.append("\t")
                    case "u":
                        let hex = rest.prefix(4)
                        guard hex.count == 4, let code = UInt32(hex, radix: 16), let scalar = Unicode.Scalar(code) else {
                            throw fail("\\u needs four hex digits")
                        }
                        rest = rest.dropFirst(4)
                        scalars.append(scalar)
                    default: throw fail("unknown escape \\\(escaped)")
                    }
                default:
                    scalars.append(contentsOf: character.unicodeScalars)
                }
            }
            throw fail("a string is not closed")
        }
    }
}
