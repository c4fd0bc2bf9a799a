// Compiled twice: into this test target, and by Scripts/fuzz.sh (with -D FUZZING, in one module
// with the RedisProtocol sources) into the `resp` libFuzzer target of Fuzz/. So the fuzzer and the
// regression tests check exactly the same properties.
#if !FUZZING
import RedisProtocol
#endif

/// The invariants the RESP parser must keep for any bytes a server might send.
enum RESPFuzzProperties {
    /// Parses `input` whole and in input-dependent chunks (empty ones included), with the default
    /// and with tight limits, and checks that every way agrees on the values and the error, and
    /// that each value encodes to bytes that parse back to it. Returns the first violation, or nil.
    static func check(_ input: [UInt8]) -> String? {
        var tight = RESPParser.Limits()
        tight.maxLineLength = 8
        tight.maxBulkLength = 32
        tight.maxArrayCount = 4
        tight.maxDepth = 2
        // A few values' worth (each costs `valueCost` besides its bytes): whole replies past it fail.
        tight.maxReplyCost = 4 * RESPParser.Limits.valueCost + 64
        for limits in [RESPParser.Limits(), tight] {
            let whole = parse(input, limits: limits, chunkSizes: [input.count])
            let sizes = input.isEmpty ? [0] : input.map { Int($0 % 7) }
            let chunked = parse(input, limits: limits, chunkSizes: sizes)
            if whole.values != chunked.values || whole.error != chunked.error {
                return "chunked parsing differs: whole \(whole.values) \(String(describing: whole.error)), "
                    + "chunked \(chunked.values) \(String(describing: chunked.error))"
            }
            for value in whole.values {
                var encoded: [UInt8] = []
                RESPEncoder.encode(value, into: &encoded)
                let reparsed = parse(encoded, limits: RESPParser.Limits(), chunkSizes: [encoded.count])
                if reparsed.values != [value] || reparsed.error != nil {
                    return "\(value) encodes to bytes that parse as \(reparsed.values) \(String(describing: reparsed.error))"
                }
            }
        }
        return nil
    }

    private struct Outcome {
        var values: [RESPValue] = []
        var error: RESPError?
    }

    private static func parse(_ input: [UInt8], limits: RESPParser.Limits, chunkSizes: [Int]) -> Outcome {
        var parser = RESPParser(limits: limits)
        var outcome = Outcome()
        var offset = 0
        var turn = 0
        // Every turn hands over a chunk (perhaps empty) and drains; at most one turn per byte
        // plus one, so a schedule of empty chunks still ends.
        while turn <= input.count, offset < input.count || turn == 0 {
            let size = min(chunkSizes[turn % chunkSizes.count], input.count - offset)
            turn += 1
            parser.append(input[offset..<offset + size])
            offset += size
            do {
                while let value = try parser.next() { outcome.values.append(value) }
            } catch {
                outcome.error = error
                return outcome
            }
        }
        if offset < input.count {
            parser.append(input[offset...])
            do {
                while let value = try parser.next() { outcome.values.append(value) }
            } catch {
                outcome.error = error
            }
        }
        return outcome
    }
}
