import ChatCore
import ChatProtocol
import ChatStorage
import Dispatch

/// Registered rooms and server bans in their own SQLite file in the data directory
/// (`moderation.sqlite`), written on a serial queue of their own.
///
/// A file of its own for the reasons `SQLiteAccountStore` gives: these change a few times a
/// day, and must neither wait behind the rooms' group commits nor be tied to their schema. The
/// data directory's lock, taken by the room store, covers this file too. Each write is one
/// transaction (`synchronous=FULL`), on `queue`: the event loop never waits for its fsync.
///
/// `@unchecked Sendable`: `database` is used only on `queue` (and by `loadAll` through it).
public final class SQLiteModerationStore: ModerationStore, @unchecked Sendable {
    /// The file.
    public let path: String
    private let database: SQLiteDatabase
    private let queue = DispatchQueue(label: "ChatAccounts.SQLiteModerationStore")

    /// Opens (creating if needed) `moderation.sqlite` in `directory`.
    public init(directory: String) throws(AccountStoreError) {
        path = directory + "/moderation.sqlite"
        do throws(SQLiteError) {
            database = try SQLiteDatabase.openStore(
                path: path,
                schema: """
                CREATE TABLE IF NOT EXISTS rooms (
                    name TEXT PRIMARY KEY NOT NULL, founder TEXT NOT NULL, invite_only INTEGER NOT NULL,
                    moderated INTEGER NOT NULL, topic_lock INTEGER NOT NULL, key TEXT NOT NULL, member_limit INTEGER NOT NULL
                ) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS room_bans (
                    room TEXT NOT NULL, position INTEGER NOT NULL, mask TEXT NOT NULL, set_by TEXT NOT NULL,
                    time INTEGER NOT NULL, reason TEXT NOT NULL, PRIMARY KEY (room, position)
                ) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS room_roles (
                    room TEXT NOT NULL, account TEXT NOT NULL, role TEXT NOT NULL, PRIMARY KEY (room, account)
                ) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS server_bans (
                    position INTEGER PRIMARY KEY NOT NULL, mask TEXT NOT NULL, set_by TEXT NOT NULL,
                    time INTEGER NOT NULL, reason TEXT NOT NULL
                );
                CREATE TABLE IF NOT EXISTS remembered_roles (
                    room TEXT NOT NULL, holder TEXT NOT NULL, role TEXT NOT NULL, PRIMARY KEY (room, holder)
                ) WITHOUT ROWID
                """)
        } catch {
            throw AccountStoreError("cannot open the moderation database: \(error)")
        }
    }

    /// Every registered room and server ban.
    public func loadAll() throws(AccountStoreError) -> ModerationSnapshot {
        let result = queue.sync { () -> Result<ModerationSnapshot, AccountStoreError> in
            do throws(SQLiteError) {
                var rooms: [String: RegisteredRoomRecord] = [:]
                let selectRooms = try database.prepare(
                    "SELECT name, founder, invite_only, moderated, topic_lock, key, member_limit FROM rooms")
                while try selectRooms.step() {
                    let name = selectRooms.text(0)
                    rooms[name] = RegisteredRoomRecord(
                        name: name, founder: selectRooms.text(1), inviteOnly: selectRooms.int64(2) != 0,
                        moderated: selectRooms.int64(3) != 0, topicLock: selectRooms.int64(4) != 0, key: selectRooms.text(5),
                        memberLimit: Int(selectRooms.int64(6)), bans: [], roles: [:])
                }
                let selectBans = try database.prepare("SELECT room, mask, set_by, time, reason FROM room_bans ORDER BY room, position")
                while try selectBans.step() {
                    rooms[selectBans.text(0)]?.bans.append(
                        BanEntry(mask: selectBans.text(1), setBy: selectBans.text(2), time: selectBans.uint64(3), reason: selectBans.text(4)))
                }
                let selectRoles = try database.prepare("SELECT room, account, role FROM room_roles")
                while try selectRoles.step() {
                    rooms[selectRoles.text(0)]?.roles[selectRoles.text(1)] = selectRoles.text(2)
                }
                var serverBans: [BanEntry] = []
                let selectServerBans = try database.prepare("SELECT mask, set_by, time, reason FROM server_bans ORDER BY position")
                while try selectServerBans.step() {
                    serverBans.append(
                        BanEntry(
                            mask: selectServerBans.text(0), setBy: selectServerBans.text(1), time: selectServerBans.uint64(2),
                            reason: selectServerBans.text(3)))
                }
                var remembered: [RememberedRole] = []
                let selectRemembered = try database.prepare("SELECT room, holder, role FROM remembered_roles ORDER BY room, holder")
                while try selectRemembered.step() {
                    remembered.append(RememberedRole(room: selectRemembered.text(0), holder: selectRemembered.text(1), role: selectRemembered.text(2)))
                }
                return .success(
                    ModerationSnapshot(rooms: rooms.values.sorted { $0.name < $1.name }, serverBans: serverBans, rememberedRoles: remembered))
            } catch {
                return .failure(AccountStoreError("cannot read the moderation database: \(error)"))
            }
        }
        return try result.get()
    }

    /// Writes `writes` in one transaction on the store's queue; answers on `replyQueue`.
    public func apply(_ writes: [ModerationWrite], replyOn replyQueue: DispatchQueue, _ completion: @escaping @Sendable (AccountStoreError?) -> Void) {
        queue.async { [self] in
            var failure: AccountStoreError?
            do throws(SQLiteError) {
                try database.transaction { () throws(SQLiteError) in
                    for write in writes { try apply(write) }
                }
            } catch {
                failure = AccountStoreError("cannot store a moderation change: \(error)")
            }
            let reported = failure
            replyQueue.async { completion(reported) }
        }
    }

    /// Writes one change; runs inside `apply`'s transaction, on `queue`.
    private func apply(_ write: ModerationWrite) throws(SQLiteError) {
        switch write {
        case .room(let name, let record):
            for table in ["rooms", "room_bans", "room_roles"] {
                let delete = try database.prepare("DELETE FROM \(table) WHERE \(table == "rooms" ? "name" : "room") = ?")
                try delete.bind(.text(name))
                try delete.run()
            }
            guard let record else { return }
            let insertRoom = try database.prepare(
                "INSERT INTO rooms (name, founder, invite_only, moderated, topic_lock, key, member_limit) VALUES (?, ?, ?, ?, ?, ?, ?)")
            try insertRoom.bind(
                .text(name), .text(record.founder), .integer(record.inviteOnly ? 1 : 0), .integer(record.moderated ? 1 : 0),
                .integer(record.topicLock ? 1 : 0), .text(record.key), .integer(Int64(record.memberLimit)))
            try insertRoom.run()
            let insertBan = try database.prepare(
                "INSERT INTO room_bans (room, position, mask, set_by, time, reason) VALUES (?, ?, ?, ?, ?, ?)")
            for (position, ban) in record.bans.enumerated() {
                insertBan.reset()
                try insertBan.bind(
                    .text(name), .integer(Int64(position)), .text(ban.mask), .text(ban.setBy), .integer(Int64(bitPattern: ban.time)),
                    .text(ban.reason))
                try insertBan.run()
            }
            let insertRole = try database.prepare("INSERT INTO room_roles (room, account, role) VALUES (?, ?, ?)")
            for (account, role) in record.roles {
                insertRole.reset()
                try insertRole.bind(.text(name), .text(account), .text(role))
                try insertRole.run()
            }
        case .rememberedRoles(let roles):
            try database.execute("DELETE FROM remembered_roles")
            let insert = try database.prepare("INSERT OR REPLACE INTO remembered_roles (room, holder, role) VALUES (?, ?, ?)")
            for role in roles {
                insert.reset()
                try insert.bind(.text(role.room), .text(role.holder), .text(role.role))
                try insert.run()
            }
        case .serverBans(let bans):
            try database.execute("DELETE FROM server_bans")
            let insert = try database.prepare("INSERT INTO server_bans (position, mask, set_by, time, reason) VALUES (?, ?, ?, ?, ?)")
            for (position, ban) in bans.enumerated() {
                insert.reset()
                try insert.bind(.integer(Int64(position)), .text(ban.mask), .text(ban.setBy), .integer(Int64(bitPattern: ban.time)), .text(ban.reason))
                try insert.run()
            }
        }
    }
}
