"""A small upstream MCP tool server for the host's tool gateway: made-up but stable weather.

    python examples/tools/weather_server.py              # stdio (what `[tools.weather] command` runs)
    python examples/tools/weather_server.py --http 8900  # Streamable HTTP on http://127.0.0.1:8900/mcp

`examples/knowledge-and-tools.toml` declares it as `[tools.weather]`; agents granted `weather__*` see its
tools as `weather__current`, `weather__forecast` and `weather__convert`. The numbers come from a hash of
the city and the day, so the same question always gets the same answer and no network is needed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
from typing import Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

server = MCPServer(
    "weather",
    instructions="Made-up weather for any city: current conditions, a forecast of up to 7 days, unit conversion.",
    log_level="WARNING",
)

SKIES = ("sunny", "partly cloudy", "cloudy", "light rain", "showers", "windy", "foggy", "snow flurries")


class Conditions(BaseModel):
    city: str
    date: str
    """ISO date."""
    sky: str
    high_c: float
    low_c: float
    precipitation_mm: float
    wind_kmh: float


class Forecast(BaseModel):
    city: str
    days: list[Conditions]


def _conditions(city: str, day: dt.date) -> Conditions:
    seed = hashlib.sha256(f"{city.strip().lower()}|{day.isoformat()}".encode()).digest()
    high = round(-5 + seed[0] / 255 * 35, 1)
    sky = SKIES[seed[1] % len(SKIES)]
    if sky == "snow flurries":
        high = min(high, 1.0)
    wet = sky in ("light rain", "showers", "snow flurries")
    return Conditions(
        city=city.strip(),
        date=day.isoformat(),
        sky=sky,
        high_c=high,
        low_c=round(high - 3 - seed[2] / 255 * 8, 1),
        precipitation_mm=round(seed[3] / 255 * 20, 1) if wet else 0.0,
        wind_kmh=round(seed[4] / 255 * 60, 1),
    )


def _city(city: str) -> str:
    if not city.strip() or len(city) > 100:
        raise ToolError("Give a city name of 1 to 100 characters, e.g. 'Lisbon'.")
    return city


@server.tool(description="Current conditions in a city (made up, but the same for the same city and day).")
def current(city: str) -> Conditions:
    return _conditions(_city(city), dt.date.today())


@server.tool(description="A forecast of 1 to 7 days for a city, starting today.")
def forecast(city: str, days: int = Field(default=3, ge=1, le=7)) -> Forecast:
    today = dt.date.today()
    return Forecast(
        city=city.strip(), days=[_conditions(_city(city), today + dt.timedelta(days=i)) for i in range(days)]
    )


@server.tool(description="Convert a temperature between Celsius and Fahrenheit.")
def convert(value: float, to: Literal["celsius", "fahrenheit"]) -> float:
    return round((value - 32) * 5 / 9, 2) if to == "celsius" else round(value * 9 / 5 + 32, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description="Made-up weather as an MCP server.")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args()
    if args.http is None:
        server.run("stdio")
    else:
        import uvicorn

        uvicorn.run(
            server.streamable_http_app(host="127.0.0.1"),
            host="127.0.0.1",
            port=args.http,
            log_level="warning",
        )


if __name__ == "__main__":
    main()
