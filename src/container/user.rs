//! Who a container's process runs as: run_as_user / run_as_group /
//! run_as_username from the CRI config, else the image's USER, resolved
//! against the image's /etc/passwd and /etc/group, plus supplemental groups.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswdEntry {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) home: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEntry {
    pub(crate) name: String,
    pub(crate) gid: u32,
    pub(crate) members: Vec<String>,
}

pub fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            Some(PasswdEntry {
                name: f.first()?.to_string(),
                uid: f.get(2)?.parse().ok()?,
                gid: f.get(3)?.parse().ok()?,
                home: f.get(5).map(|h| h.to_string()).unwrap_or_default(),
            })
        })
        .collect()
}

pub fn parse_group(text: &str) -> Vec<GroupEntry> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            Some(GroupEntry {
                name: f.first()?.to_string(),
                gid: f.get(2)?.parse().ok()?,
                members: f
                    .get(3)
                    .map(|m| m.split(',').filter(|s| !s.is_empty()).map(String::from).collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// What the config and the image ask for.
#[derive(Debug, Clone, Default)]
pub struct UserRequest {
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub run_as_username: String,
    /// The image config's User: `name`, `uid`, `name:group`, `uid:gid`…
    pub image_user: String,
    pub supplemental_groups: Vec<i64>,
    /// SupplementalGroupsPolicy Strict: only the config's groups, not /etc/group's.
    pub strict_groups: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedUser {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) additional_gids: Vec<u32>,
    pub(crate) username: Option<String>,
    /// The user's home in the image's /etc/passwd; `/` when it has none.
    pub(crate) home: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {why}")]
pub struct UserError {
    pub(crate) field: &'static str,
    pub(crate) why: String,
}

fn id(field: &'static str, value: i64) -> Result<u32, UserError> {
    u32::try_from(value).map_err(|_| UserError { field, why: format!("{value} is not a valid id") })
}

pub fn resolve(req: &UserRequest, passwd: &[PasswdEntry], groups: &[GroupEntry]) -> Result<ResolvedUser, UserError> {
    let by_uid = |uid: u32| passwd.iter().find(|p| p.uid == uid);
    let by_name = |field: &'static str, name: &str| {
        passwd
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| UserError { field, why: format!("user {name:?} is not in the image's /etc/passwd") })
    };
    let mut explicit_gid = None;
    let (uid, entry) = if let Some(uid) = req.run_as_user {
        let uid = id("run_as_user", uid)?;
        (uid, by_uid(uid))
    } else if !req.run_as_username.is_empty() {
        match req.run_as_username.parse::<u32>() {
            Ok(uid) => (uid, by_uid(uid)),
            Err(_) => {
                let e = by_name("run_as_username", &req.run_as_username)?;
                (e.uid, Some(e))
            }
        }
    } else if req.image_user.is_empty() {
        (0, by_uid(0))
    } else {
        let (user, group) = match req.image_user.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (req.image_user.as_str(), None),
        };
        let (uid, entry) = match user.parse::<u32>() {
            Ok(uid) => (uid, by_uid(uid)),
            Err(_) => {
                let e = by_name("image user", user)?;
                (e.uid, Some(e))
            }
        };
        if let Some(group) = group.filter(|g| !g.is_empty()) {
            explicit_gid = Some(match group.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => groups.iter().find(|g| g.name == group).map(|g| g.gid).ok_or_else(|| UserError {
                    field: "image user",
                    why: format!("group {group:?} is not in the image's /etc/group"),
                })?,
            });
        }
        (uid, entry)
    };
    let gid = match req.run_as_group {
        Some(gid) => id("run_as_group", gid)?,
        None => explicit_gid.or(entry.map(|e| e.gid)).unwrap_or(0),
    };
    let username = entry.map(|e| e.name.clone());
    let home = entry.map(|e| e.home.clone()).filter(|h| !h.is_empty()).unwrap_or_else(|| "/".into());
    let mut additional_gids = Vec::new();
    if !req.strict_groups {
        if let Some(name) = &username {
            additional_gids.extend(groups.iter().filter(|g| g.members.iter().any(|m| m == name)).map(|g| g.gid));
        }
    }
    for g in &req.supplemental_groups {
        additional_gids.push(id("supplemental_groups", *g)?);
    }
    // As runc and containerd have it: the process's groups include its own
    // gid, and ContainerStatus.user lists them all, in order.
    additional_gids.push(gid);
    additional_gids.sort_unstable();
    additional_gids.dedup();
    Ok(ResolvedUser { uid, gid, additional_gids, username, home })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n# comment\napp:x:1000:1000::/home/app:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n";
    const GROUP: &str = "root:x:0:\napp:x:1000:\nextra:x:2000:app,other\nnogroup:x:65534:\n";

    fn resolve_with(req: UserRequest) -> Result<ResolvedUser, UserError> {
        resolve(&req, &parse_passwd(PASSWD), &parse_group(GROUP))
    }

    #[test]
    fn image_user_forms() {
        let r = resolve_with(UserRequest { image_user: "app".into(), ..Default::default() }).unwrap();
        assert_eq!((r.uid, r.gid, r.additional_gids.clone()), (1000, 1000, vec![1000, 2000]));
        assert_eq!(r.home, "/home/app");
        let r = resolve_with(UserRequest { image_user: "1000:2000".into(), ..Default::default() }).unwrap();
        assert_eq!((r.uid, r.gid), (1000, 2000));
        let r = resolve_with(UserRequest { image_user: "nobody:extra".into(), ..Default::default() }).unwrap();
        assert_eq!((r.uid, r.gid), (65534, 2000));
        let r = resolve_with(UserRequest { image_user: "4242".into(), ..Default::default() }).unwrap();
        assert_eq!((r.uid, r.gid, r.username, r.home.as_str()), (4242, 0, None, "/"));
        let r = resolve_with(UserRequest::default()).unwrap();
        assert_eq!((r.uid, r.gid, r.username.as_deref(), r.home.as_str()), (0, 0, Some("root"), "/root"));
        assert!(resolve_with(UserRequest { image_user: "ghost".into(), ..Default::default() }).is_err());
        assert!(resolve_with(UserRequest { image_user: "app:ghosts".into(), ..Default::default() }).is_err());
    }

    #[test]
    fn config_overrides_the_image() {
        let r = resolve_with(UserRequest {
            run_as_user: Some(1000),
            run_as_group: Some(3000),
            image_user: "nobody".into(),
            supplemental_groups: vec![4000, 2000],
            ..Default::default()
        })
        .unwrap();
        assert_eq!((r.uid, r.gid, r.additional_gids), (1000, 3000, vec![2000, 3000, 4000]));
        let r = resolve_with(UserRequest { run_as_username: "app".into(), ..Default::default() }).unwrap();
        assert_eq!((r.uid, r.gid), (1000, 1000));
        let r =
            resolve_with(UserRequest { run_as_user: Some(1000), strict_groups: true, ..Default::default() }).unwrap();
        assert_eq!(r.additional_gids, vec![1000], "Strict: its own group only");
        assert_eq!(
            resolve_with(UserRequest { run_as_user: Some(-1), ..Default::default() }).unwrap_err().field,
            "run_as_user"
        );
        assert_eq!(
            resolve_with(UserRequest { run_as_username: "ghost".into(), ..Default::default() }).unwrap_err().field,
            "run_as_username"
        );
    }
}
