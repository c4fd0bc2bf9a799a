import ChatCore
import ChatProtocol
import RedisClient
import RedisProtocol

/// The server bans of a cluster, kept in Redis so that every node refuses the same sessions
/// (docs/CLUSTER.md, "Moderation").
///
/// A ban is a field of one hash (mask → `time setBy reason`), bounded by
/// `ModerationLimits.maxServerBans`. A change is published on `channel` (`+mask` or `-mask`) in
/// the same script, so a node that listens ends the sessions a new ban matches; a node that
/// starts, or reconnects, reads them all (`all`).
///
/// Threading: confined to the queue of its connection.
public struct ClusterServerBans: Sendable {
    /// The hash of the bans.
    public static let key = Array("chat:serverbans".utf8)
    /// Where changes are published.
    public static let channel = Array("chat:serverbans:changes".utf8)

    private let commands: RedisConnection

    /// Bans read and written through `commands`.
    public init(commands: RedisConnection) {
        self.commands = commands
    }

    /// The script `ban` runs. KEYS: the hash. ARGV: the channel, `1` to ban (`0` to lift), the
    /// mask, the setter's nick (`-` for none), the reason, the most bans kept.
    static let banScript = """
        if ARGV[2] == '1' then
            if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[6]) then
                return redis.error_reply('LISTFULL the server has ' .. ARGV[6] .. ' bans, the most it holds')
            end
            local now = redis.call('TIME')
            local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
            redis.call('HSET', KEYS[1], ARGV[3], ms .. ' ' .. ARGV[4] .. ' ' .. ARGV[5])
            redis.call('PUBLISH', ARGV[1], '+' .. ARGV[3])
        elseif redis.call('HDEL', KEYS[1], ARGV[3]) == 1 then
            redis.call('PUBLISH', ARGV[1], '-' .. ARGV[3])
        end
        return 1
        """

    /// Bans `mask` (canonical, as the node writes it) server-wide, or lifts the ban (`on` false);
    /// `setBy` empty for none. Fails with `.refused("LISTFULL …")` past
    /// `ModerationLimits.maxServerBans`.
    public func set(_ mask: String, on: Bool, setBy: String, reason: String, completion: @escaping (Result<Void, ClusterError>) -> Void) {
        commands.send([
            Array("EVAL".utf8), Array(Self.banScript.utf8), Array("1".utf8), Self.key, Self.channel,
            Array((on ? "1" : "0").utf8), Array(mask.utf8), Array((setBy.isEmpty ? "-" : setBy).utf8), Array(reason.utf8),
            Array(String(ModerationLimits.maxServerBans).utf8),
        ]) { reply in completion(ClusterDirectory.done(reply)) }
    }

    /// Every server ban, oldest first.
    public func all(completion: @escaping (Result<[BanEntry], ClusterError>) -> Void) {
        ClusterDirectory(commands: commands).bans(in: Self.key, completion: completion)
    }

    /// A change as published: the mask and whether it is now banned; nil for anything else.
    public static func parseChange(_ body: [UInt8]) -> (mask: String, banned: Bool)? {
        guard let sign = body.first, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-"), body.count > 1 else { return nil }
        return (String(decoding: body.dropFirst(), as: UTF8.self), sign == UInt8(ascii: "+"))
    }
}
