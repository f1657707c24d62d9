"""What claw synthesis draws from: people, companies, topics. Plain data, chosen by seed."""

FIRST = ["Bob", "Carol", "Dana", "Erin", "Frank", "Gina", "Hugo", "Ines", "Jonas", "Kira", "Lars", "Mona",
         "Nils", "Olga", "Pavel", "Rita", "Sami", "Tara", "Umar", "Vera"]
LAST = ["Stone", "Meyer", "Okafor", "Lindqvist", "Rossi", "Tanaka", "Novak", "Haddad", "Keller", "Moreau",
        "Silva", "Berg", "Kowalski", "Fischer", "Duarte", "Ivanova"]
COMPANIES = [("Acme Tools", "acme.test"), ("Birch Logistics", "birch.test"), ("Cobalt Labs", "cobalt.test"),
             ("Delta Print", "deltaprint.test"), ("Elm Catering", "elmcatering.test"),
             ("Fjord Travel", "fjord.test")]
TOPICS = ["budget review", "roadmap sync", "hiring plan", "vendor onboarding", "launch checklist",
          "quarterly report", "design critique", "security audit"]
# mail-search's topics: many, so that a policy which searches one fixed topic without reading the
# prompt is rarely rewarded.
SEARCH_TOPICS = TOPICS + ["offsite agenda", "pricing update", "customer escalation", "office move",
                          "travel policy", "partner summit", "release notes", "onboarding guide",
                          "data migration", "support rota", "press briefing", "annual survey",
                          "benefits enrolment", "code freeze", "api deprecation", "board meeting",
                          "sales kickoff", "incident review", "brand refresh", "cloud costs",
                          "team retreat", "contract renewal"]
NEWSLETTERS = [("Daily Deals", "deals@shopmail.test"), ("Tech Digest", "digest@technews.test"),
               ("Garden Weekly", "news@gardenweekly.test"), ("Travel Ideas", "hello@travelideas.test")]
ROOMS = ["B-214", "C-017", "A-302", "D-110", "E-045"]
EXPENSE_CATEGORIES = ["travel", "meals", "software", "office"]
ACTION_ITEMS = [("book the venue", "venue"), ("send the invitations", "invitations"),
                ("order the catering", "catering"), ("print the badges", "badges"),
                ("update the agenda", "agenda"), ("test the projector", "projector")]
USERS = [("Alex Morgan", "alex@orchard.test"), ("Sam Rivera", "sam@orchard.test"),
         ("Jo Bauer", "jo@orchard.test")]
