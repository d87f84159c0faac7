//! The web console as a browser meets it, without the browser: a sign-in with the admin token,
//! the session's cookie kept and sent (with the console's own `Origin`) where the test says, and
//! the pages' forms read. The browser itself is `tests/observability/console.mjs`'s; this is for
//! the tests that judge one answer.

use super::AdminApi;

/// A console session opened by signing in over HTTP.
#[derive(Debug, Clone)]
pub struct ConsoleSession {
    /// The admin listener, `http://127.0.0.1:PORT`.
    pub admin: String,
    /// The path the sign-in led to (the overview); the session's pages are below it.
    pub base: String,
    /// The `Set-Cookie` header the sign-in answered, as sent.
    pub set_cookie: String,
    /// `name=value`, as a browser sends the cookie back.
    pub cookie: String,
}

impl ConsoleSession {
    /// Signs in to the console of the daemon whose admin API is `admin`.
    pub async fn sign_in(admin: &AdminApi) -> Self {
        let answer = client()
            .post(format!("{}/console/login", admin.url))
            .header("origin", &admin.url)
            .form(&[("token", admin.token.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 303, "the sign-in leads on: {answer:?}");
        let base = answer.headers()["location"].to_str().unwrap().to_owned();
        let set_cookie = answer.headers()["set-cookie"].to_str().unwrap().to_owned();
        let cookie = set_cookie.split(';').next().unwrap().trim().to_owned();
        Self {
            admin: admin.url.clone(),
            base,
            set_cookie,
            cookie,
        }
    }

    /// `GET` the page at `page`, relative to [`Self::base`] (`""` is the overview), with the
    /// cookie; redirects are not followed.
    pub async fn get(&self, page: &str) -> reqwest::Response {
        self.get_path(&format!("{}{page}", self.base)).await
    }

    /// `GET` the absolute `path` (a query string may be part of it), with the cookie.
    pub async fn get_path(&self, path: &str) -> reqwest::Response {
        client()
            .get(format!("{}{path}", self.admin))
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap()
    }

    /// The text of the page at `page` (relative to [`Self::base`]), which must answer 200.
    pub async fn page(&self, page: &str) -> String {
        let answer = self.get(page).await;
        let status = answer.status();
        let text = answer.text().await.unwrap();
        assert_eq!(status, 200, "{page}: {text}");
        text
    }

    /// The session's CSRF token, from the overview's forms.
    pub async fn csrf(&self) -> String {
        let page = self.page("").await;
        let at = page
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("no CSRF field on the overview: {page}"));
        let rest = &page[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }

    /// `POST` the form `fields` to the absolute `path` (a query string may be part of it), with
    /// the cookie and the console's own `Origin`; redirects are not followed.
    pub async fn post_path(&self, path: &str, fields: &[(&str, &str)]) -> reqwest::Response {
        client()
            .post(format!("{}{path}", self.admin))
            .header("cookie", &self.cookie)
            .header("origin", &self.admin)
            .form(fields)
            .send()
            .await
            .unwrap()
    }
}

/// A client that follows no redirect (the test reads where they lead) and no proxy.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// One form of a page, as a browser reads it.
#[derive(Debug, Clone)]
pub struct Form {
    /// Where it posts, as written (the browser resolves it against the page's address).
    pub action: String,
    /// The text of its submit button.
    pub button: String,
    /// Its inputs' names and values (the CSRF token among them).
    pub fields: Vec<(String, String)>,
}

/// The forms of an HTML page.
pub fn forms(html: &str) -> Vec<Form> {
    html.split("<form")
        .skip(1)
        .map(|form| {
            let form = &form[..form.find("</form>").unwrap_or(form.len())];
            let button = form.find("<button").map_or("", |b| {
                let text = &form[b..];
                let open = text.find('>').map_or(0, |o| o + 1);
                &text[open..text.find("</button>").unwrap_or(text.len())]
            });
            let fields = (form.split("<input").skip(1))
                .filter_map(|input| {
                    let input = &input[..input.find('>').unwrap_or(input.len())];
                    let name = attribute(input, "name")?;
                    let value = attribute(input, "value").unwrap_or_default();
                    Some((unescape(&name), unescape(&value)))
                })
                .collect();
            Form {
                action: unescape(&attribute(form, "action").unwrap_or_default()),
                button: unescape(button),
                fields,
            }
        })
        .collect()
}

/// The value of the first `name="…"` attribute in `tag`.
fn attribute(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    Some(tag[at..at + tag[at..].find('"')?].to_owned())
}

/// HTML text as a browser reads it (the entities maud writes).
pub fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}
